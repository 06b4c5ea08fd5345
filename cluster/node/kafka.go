package node

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/raftlog/raftlog/cluster"
	"github.com/raftlog/raftlog/replication"
	"github.com/raftlog/raftlog/rpc"
	"github.com/twmb/franz-go/pkg/kerr"
)

// broker is the Kafka front end's view of a cluster member: rpc's Broker,
// GroupBroker and ReassignBroker over cluster.Node.
type broker struct{ n *cluster.Node }

var _ rpc.Broker = broker{}

func (b broker) NodeID() int32       { return b.n.ID() }
func (b broker) ClusterID() string   { return b.n.Meta().ClusterID() }
func (b broker) ControllerID() int32 { return b.n.ControllerID() }

func (b broker) Brokers() []rpc.BrokerInfo {
	var out []rpc.BrokerInfo
	for _, m := range b.n.Brokers() {
		if bi, ok := kafkaBroker(m); ok {
			out = append(out, bi)
		}
	}
	return out
}

// LookupBroker is a registered broker that is not a live member here
// (cluster.Node.LookupBroker).
func (b broker) LookupBroker(id int32) (rpc.BrokerInfo, bool) {
	m, _, ok := b.n.LookupBroker(id)
	if !ok {
		return rpc.BrokerInfo{}, false
	}
	return kafkaBroker(m)
}

// kafkaBroker is a broker at its advertised Kafka address.
func kafkaBroker(m cluster.BrokerInfo) (rpc.BrokerInfo, bool) {
	host, port, err := net.SplitHostPort(m.KafkaAddr)
	if err != nil {
		return rpc.BrokerInfo{}, false
	}
	p, _ := strconv.Atoi(port)
	bi := rpc.BrokerInfo{NodeID: m.NodeID, Host: host, Port: int32(p)}
	if m.Rack != "" {
		r := m.Rack
		bi.Rack = &r
	}
	return bi, true
}

func (b broker) Topics(names []string) []rpc.TopicInfo {
	var ts []cluster.Topic
	var out []rpc.TopicInfo
	if names == nil {
		ts = b.n.Meta().Topics()
	} else {
		for _, name := range names {
			t, ok := b.n.Meta().Topic(name)
			if !ok {
				out = append(out, rpc.TopicInfo{Name: name, Err: kerr.UnknownTopicOrPartition})
				continue
			}
			ts = append(ts, t)
		}
	}
	for _, t := range ts {
		ti := rpc.TopicInfo{Name: t.Name, ID: t.ID}
		for _, ps := range b.n.PartitionStates(t) {
			pi := rpc.PartitionInfo{Partition: ps.Partition, Leader: ps.Leader, LeaderEpoch: ps.LeaderEpoch,
				Replicas: ps.Replicas, ISR: ps.ISR, Offline: ps.Offline}
			if ps.Leader < 0 {
				pi.Err = kerr.LeaderNotAvailable
			}
			ti.Partitions = append(ti.Partitions, pi)
		}
		out = append(out, ti)
	}
	return out
}

func (b broker) CreateTopic(ctx context.Context, requester, name string, partitions int32, replication int16, configs map[string]string, validateOnly bool) error {
	return kafkaErr(b.n.Controller().CreateTopicFor(ctx, requester, name, partitions, replication, configs, validateOnly))
}

func (b broker) AwaitLeaders(ctx context.Context, topic string) { b.n.AwaitLeaders(ctx, topic) }

func (b broker) DeleteTopic(ctx context.Context, name string) error {
	return kafkaErr(b.n.Controller().DeleteTopic(ctx, name))
}

func (b broker) CreatePartitions(ctx context.Context, name string, count int32, validateOnly bool) error {
	return kafkaErr(b.n.Controller().CreatePartitions(ctx, name, count, validateOnly))
}

func (b broker) TopicConfigs(name string) ([]rpc.ConfigEntry, error) {
	set, err := b.n.TopicConfigs(name)
	if err != nil {
		return nil, kafkaErr(err)
	}
	var out []rpc.ConfigEntry
	for _, k := range cluster.TopicConfigNames() {
		v, ok := set[k]
		def := !ok
		if !ok {
			v, _ = cluster.TopicConfigDefault(k)
		}
		vv := v
		out = append(out, rpc.ConfigEntry{Name: k, Value: &vv, IsDefault: def})
	}
	return out, nil
}

func (b broker) AlterTopicConfigs(ctx context.Context, name string, changes []rpc.ConfigChange, validateOnly bool) error {
	set := map[string]string{}
	var dels []string
	for _, c := range changes {
		switch c.Op {
		case 0:
			if c.Value == nil {
				return kerr.InvalidConfig
			}
			set[c.Name] = *c.Value
		case 1:
			dels = append(dels, c.Name)
		default:
			return kerr.InvalidConfig
		}
	}
	return kafkaErr(b.n.Controller().AlterTopicConfigs(ctx, name, set, dels, validateOnly))
}

func (b broker) Partition(topic string, p int32) (rpc.Partition, error) {
	r, err := b.n.LeaderPartition(topic, p)
	if err != nil {
		return nil, kafkaErr(err)
	}
	return partition{r: r}, nil
}

func (b broker) InitProducerID(ctx context.Context, transactionalID *string, producerID int64, epoch int16) (int64, int16, error) {
	if transactionalID != nil {
		return -1, -1, kerr.TransactionalIDAuthorizationFailed
	}
	id, e, err := b.n.Controller().InitProducerID(ctx, producerID, epoch)
	return id, e, kafkaErr(err)
}

var (
	_ rpc.GroupBroker        = broker{}
	_ rpc.PipelinedPartition = partition{}
)

// The group coordinator of every group is the controller's leader: the
// committed offsets are controller commands.
func (b broker) Coordinator() int32 { return b.n.ControllerID() }

func (b broker) CommitOffsets(ctx context.Context, group string, offs []rpc.CommittedOffset) error {
	var gs []cluster.GroupOffset
	for _, o := range offs {
		gs = append(gs, cluster.GroupOffset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata})
	}
	return kafkaErr(b.n.Controller().CommitOffsets(ctx, group, gs))
}

func (b broker) FetchOffsets(group string, topics []string) ([]rpc.CommittedOffset, error) {
	var out []rpc.CommittedOffset
	for _, o := range b.n.Meta().GroupOffsets(group, topics) {
		c := rpc.CommittedOffset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata}
		if o.CommitTime > 0 {
			c.CommitTime = time.UnixMilli(o.CommitTime)
		}
		out = append(out, c)
	}
	return out, nil
}

func (b broker) DeleteOffsets(ctx context.Context, group string, parts []rpc.TopicPartition) error {
	var gs []cluster.GroupOffset
	for _, p := range parts {
		gs = append(gs, cluster.GroupOffset{Topic: p.Topic, Partition: p.Partition})
	}
	if parts != nil && len(gs) == 0 {
		return nil
	}
	return kafkaErr(b.n.Controller().DeleteOffsets(ctx, group, gs))
}

func (b broker) OffsetGroups() []string { return b.n.Meta().OffsetGroups() }

func (b broker) ExpireOffsets(ctx context.Context, group string, offsets []rpc.CommittedOffset) error {
	gs := make([]cluster.GroupOffset, 0, len(offsets))
	for _, o := range offsets {
		g := cluster.GroupOffset{Topic: o.Topic, Partition: o.Partition}
		if !o.CommitTime.IsZero() {
			g.CommitTime = o.CommitTime.UnixMilli()
		}
		gs = append(gs, g)
	}
	return kafkaErr(b.n.Controller().ExpireOffsets(ctx, group, gs))
}

func (b broker) StoreGroup(ctx context.Context, group, token string, value []byte) error {
	return kafkaErr(b.n.Controller().StoreGroup(ctx, group, token, value))
}

func (b broker) StoredGroups() map[string]rpc.StoredGroup {
	stored := b.n.Meta().StoredGroups()
	out := make(map[string]rpc.StoredGroup, len(stored))
	for name, g := range stored {
		out[name] = rpc.StoredGroup{Token: g.Token, Value: g.Value}
	}
	return out
}

func (b broker) GroupsLoaded() (uint64, bool) { return b.n.Controller().GroupsLoaded() }

// partition is a led replica seen by the Kafka front end.
type partition struct{ r *replication.Replica }

func (p partition) Append(ctx context.Context, batch []byte, acks int) (int64, error) {
	off, err := p.r.Append(ctx, batch, acks)
	return off, kafkaErr(err)
}

// StartAppend makes partition an rpc.PipelinedPartition.
func (p partition) StartAppend(ctx context.Context, batch []byte, acks int) (func() (int64, error), error) {
	pa, err := p.r.StartAppend(ctx, batch, acks)
	if err != nil {
		return nil, kafkaErr(err)
	}
	return func() (int64, error) {
		off, err := pa.Wait()
		return off, kafkaErr(err)
	}, nil
}

func (p partition) Read(offset int64, maxBytes int) ([]byte, error) {
	b, err := p.r.ReadRecords(offset, maxBytes)
	return b, kafkaErr(err)
}
func (p partition) HighWatermark() int64 { return p.r.HighWatermark() }
func (p partition) WaitHighWatermark(ctx context.Context, past int64) int64 {
	return p.r.WaitHighWatermark(ctx, past)
}
func (p partition) LogStartOffset() int64 { return p.r.Log().StartOffset() }
func (p partition) LeaderEpoch() int32    { return int32(p.r.Term()) }

func (p partition) OffsetForTimestamp(ts int64) (int64, int64, bool, error) {
	off, epoch, ok, err := p.r.Log().OffsetForTimestamp(ts, p.r.HighWatermark())
	return off, epoch, ok, kafkaErr(err)
}

func (p partition) MaxTimestamp() (int64, int64, bool, error) {
	ts := p.r.Log().MaxTimestamp()
	if ts < 0 {
		return -1, -1, false, nil
	}
	return p.OffsetForTimestamp(ts)
}

func (p partition) EndOffsetForEpoch(epoch int32) (int64, int32, error) {
	end, e, err := p.r.EndOffsetForEpoch(epoch)
	return end, e, kafkaErr(err)
}

func (p partition) DeleteRecords(ctx context.Context, offset int64) (int64, error) {
	off, err := p.r.DeleteRecords(ctx, offset)
	if err != nil {
		return -1, kafkaErr(err)
	}
	return off, nil
}
