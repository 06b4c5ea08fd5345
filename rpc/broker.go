// Package rpc is raftlog's Kafka wire-protocol server: it decodes requests
// with franz-go's kmsg, serves them against a Broker, and encodes the
// responses. One file per API key, each headed by the versions and
// behaviour it serves, all registered in one table (handlers.go).
//
// rpc defines the small Broker interface it needs; cmd/raftlog wires the
// cluster into it.
package rpc

import (
	"context"
	"time"
)

// Broker is what the Kafka front end needs from the node it runs on.
//
// Errors that a Kafka client must see as a specific error code wrap the
// matching *kerr.Error (github.com/twmb/franz-go/pkg/kerr), for example
// kerr.NotLeaderForPartition or kerr.UnknownTopicOrPartition; rpc maps any
// other error to kerr.UnknownServerError.
type Broker interface {
	// NodeID is this broker's Kafka node id.
	NodeID() int32
	// ClusterID is the cluster's id.
	ClusterID() string
	// ControllerID is the node id of the current controller, -1 if none.
	ControllerID() int32
	// Brokers lists the live brokers with their advertised Kafka address.
	Brokers() []BrokerInfo
	// LookupBroker returns broker id's advertised Kafka address when it
	// is not among Brokers but the cluster knows it (registered, not a
	// live member as this node sees it); false when it is unknown. An
	// answer that names a broker (a partition's leader or replica, the
	// controller, the group coordinator) lists it, looked up so when it
	// is not live, and names no leader it cannot list.
	LookupBroker(id int32) (BrokerInfo, bool)
	// Topics describes the named topics, or every topic when names is nil.
	// A name that does not exist is returned with Err set (wrapping
	// kerr.UnknownTopicOrPartition).
	Topics(names []string) []TopicInfo

	// CreateTopic creates a topic; partitions/replication -1 take the
	// cluster defaults. validateOnly checks without creating. requester
	// names the client asking (its client id and host): the same request
	// retried by it soon after succeeds as the first did, where anyone
	// else gets TOPIC_ALREADY_EXISTS.
	CreateTopic(ctx context.Context, requester, name string, partitions int32, replication int16, configs map[string]string, validateOnly bool) error
	// DeleteTopic deletes a topic and its data.
	DeleteTopic(ctx context.Context, name string) error
	// CreatePartitions raises a topic's partition count to count.
	CreatePartitions(ctx context.Context, name string, count int32, validateOnly bool) error
	// AwaitLeaders returns once every partition of topic has a leader, or
	// ctx ends: CreateTopics and CreatePartitions answer when the
	// partitions they made can be written, as Kafka clients assume.
	AwaitLeaders(ctx context.Context, topic string)
	// TopicConfigs returns the topic's configuration (every key the broker
	// knows, defaults included).
	TopicConfigs(name string) ([]ConfigEntry, error)
	// AlterTopicConfigs applies incremental changes (op: 0 set, 1 delete,
	// as IncrementalAlterConfigs).
	AlterTopicConfigs(ctx context.Context, name string, changes []ConfigChange, validateOnly bool) error

	// Partition returns the replica of topic/partition that this node
	// leads; kerr.NotLeaderForPartition when another node leads it,
	// kerr.UnknownTopicOrPartition when it does not exist.
	Partition(topic string, partition int32) (Partition, error)

	// InitProducerID hands out a producer id and epoch (idempotent
	// producers); transactionalID is nil for non-transactional ones. A
	// producer that already has an id passes it and its epoch (v3+,
	// KIP-360) to have the epoch bumped; otherwise both are -1.
	InitProducerID(ctx context.Context, transactionalID *string, producerID int64, epoch int16) (id int64, newEpoch int16, err error)
}

// Partition is a partition led by this node.
type Partition interface {
	// Append replicates one RecordBatch v2 and returns its base offset
	// (acks: 0, 1 or -1; see replication.Replica.Append). batch is
	// rewritten in place.
	Append(ctx context.Context, batch []byte, acks int) (baseOffset int64, err error)
	// Read returns whole batches from offset up to maxBytes, below the
	// high watermark (the first batch whole even when larger).
	Read(offset int64, maxBytes int) ([]byte, error)
	// HighWatermark is the end of the committed log.
	HighWatermark() int64
	// WaitHighWatermark blocks until the high watermark passes past or ctx
	// ends, and returns it.
	WaitHighWatermark(ctx context.Context, past int64) int64
	// LogStartOffset is the first readable offset.
	LogStartOffset() int64
	// LeaderEpoch is the current leader epoch (the Raft term).
	LeaderEpoch() int32
	// OffsetForTimestamp finds the first committed record with timestamp
	// at least ts.
	OffsetForTimestamp(ts int64) (offset, timestamp int64, found bool, err error)
	// MaxTimestamp returns the largest timestamp and the offset of the
	// first record that has it (found false when empty).
	MaxTimestamp() (offset, timestamp int64, found bool, err error)
	// EndOffsetForEpoch is OffsetForLeaderEpoch: the end offset of the
	// largest epoch at most epoch, and that epoch; (-1, -1) when unknown.
	EndOffsetForEpoch(epoch int32) (endOffset int64, leaderEpoch int32, err error)
	// DeleteRecords moves the log start offset up to offset (-1: the high
	// watermark) and returns the new log start offset.
	DeleteRecords(ctx context.Context, offset int64) (int64, error)
}

// PipelinedPartition is a Partition that splits Append in two, so that
// several Produce requests of one connection can be in flight at once and
// still be appended in the order they arrived (as Redpanda pipelines
// them). StartAppend does the ordered part (checks, producer sequence,
// hand-off to replication) and returns without waiting for the commit;
// wait, called once from any goroutine, returns what Append would have.
type PipelinedPartition interface {
	Partition
	StartAppend(ctx context.Context, batch []byte, acks int) (wait func() (baseOffset int64, err error), err error)
}

// BrokerInfo describes a live broker.
type BrokerInfo struct {
	NodeID int32
	Host   string
	Port   int32
	Rack   *string
}

// TopicInfo describes a topic.
type TopicInfo struct {
	Name       string
	ID         [16]byte
	Internal   bool
	Partitions []PartitionInfo
	Err        error
}

// PartitionInfo describes a partition.
type PartitionInfo struct {
	Partition   int32
	Leader      int32 // -1 when none
	LeaderEpoch int32
	Replicas    []int32
	ISR         []int32
	Offline     []int32
	Err         error // e.g. kerr.LeaderNotAvailable
}

// ConfigEntry is one topic configuration value.
type ConfigEntry struct {
	Name      string
	Value     *string
	ReadOnly  bool
	IsDefault bool
	Sensitive bool
}

// ConfigChange is one IncrementalAlterConfigs operation.
type ConfigChange struct {
	Name  string
	Op    int8 // 0 set, 1 delete (2 append, 3 subtract: lists only)
	Value *string
}

// GroupBroker is what the consumer-group coordinator needs besides Broker.
// A Broker that also implements it serves the group APIs (FindCoordinator,
// JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
// ListGroups, DescribeGroups, DeleteGroups, OffsetDelete).
//
// The coordinator of every group is one node (Coordinator): membership and
// generations live in its memory, committed offsets in replicated storage
// (CommitOffsets), so a coordinator change keeps every committed offset and
// members simply rejoin.
type GroupBroker interface {
	// Coordinator is the node id of the coordinator of groups now (-1: none
	// elected yet).
	Coordinator() int32
	// CommitOffsets stores committed offsets durably (replicated; returns
	// after commit on a quorum).
	CommitOffsets(ctx context.Context, group string, offsets []CommittedOffset) error
	// FetchOffsets returns a group's committed offsets (all topics when
	// topics is nil).
	FetchOffsets(group string, topics []string) ([]CommittedOffset, error)
	// DeleteOffsets deletes a group's committed offsets of the given
	// partitions (all of the group's when parts is nil).
	DeleteOffsets(ctx context.Context, group string, parts []TopicPartition) error
	// OffsetGroups lists the groups that have committed offsets.
	OffsetGroups() []string
	// ExpireOffsets deletes each of a group's offsets given unless it was
	// committed again after its CommitTime (as FetchOffsets told it), in
	// the order of the commits, so that a commit that lands first is
	// kept: offset retention.
	ExpireOffsets(ctx context.Context, group string, offsets []CommittedOffset) error
	// StoreGroup stores a group's membership (Kafka's GroupMetadataValue)
	// durably under token, the coordinator's name for its incarnation of
	// the group, so that a coordinator taking over resumes the group.
	// A nil value removes it (only the one stored under token, when token
	// is set). Only the coordinator stores: elsewhere NOT_COORDINATOR.
	StoreGroup(ctx context.Context, group, token string, value []byte) error
	// StoredGroups returns the stored groups, by name.
	StoredGroups() map[string]StoredGroup
	// GroupsLoaded tells the epoch of this node's role as the coordinator
	// (a new one each time it takes the role; its groups are then loaded
	// again) and whether StoredGroups holds everything the coordinators
	// before it stored (until then it answers
	// COORDINATOR_LOAD_IN_PROGRESS).
	GroupsLoaded() (epoch uint64, loaded bool)
}

// StoredGroup is a group's membership as StoreGroup stored it.
type StoredGroup struct {
	Token string
	Value []byte
}

// CommittedOffset is one committed offset.
type CommittedOffset struct {
	Topic       string
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Metadata    string
	// CommitTime is when it was committed (FetchOffsets; zero: not known),
	// which offset retention counts from.
	CommitTime time.Time
}

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}
