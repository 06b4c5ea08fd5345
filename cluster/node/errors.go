package node

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/replication"
	"github.com/twmb/franz-go/pkg/kerr"
)

// kafkaErr is the one mapping from the node's errors to the Kafka error a
// client must see. Every error the node hands to the Kafka front end
// passes through it: what the cluster already answers with a Kafka code
// (validation, NOT_CONTROLLER, UNKNOWN_TOPIC_OR_PARTITION) is kept, what a
// replica, Raft or the log return is wrapped in the code clients switch
// on, keeping the message that says what happened. rpc reads the code
// from the chain (errors.As) and answers UNKNOWN_SERVER_ERROR for an
// error left unmapped.
func kafkaErr(err error) error {
	var ke *kerr.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ke):
		return err
	case errors.As(err, new(*replication.NotLeaderError)):
		// Leadership moved: the producer refreshes metadata and retries.
		return wrapCode(kerr.NotLeaderForPartition, err)
	}
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			return wrapCode(c.code, err)
		}
	}
	return err
}

// errorCodes are the Kafka codes of the errors kafkaErr maps by value.
var errorCodes = []struct {
	err  error
	code *kerr.Error
}{
	{replication.ErrOutOfOrderSequence, kerr.OutOfOrderSequenceNumber},
	{replication.ErrProducerFenced, kerr.InvalidProducerEpoch},
	{replication.ErrDuplicateSequence, kerr.DuplicateSequenceNumber},
	// The replica is going away (topic deleted, node stopping, leadership
	// moving): clients retry elsewhere.
	{raft.ErrRaftShutdown, kerr.NotLeaderForPartition},
	{log.ErrClosed, kerr.NotLeaderForPartition},
	{os.ErrClosed, kerr.NotLeaderForPartition},
	{raft.ErrLeadershipLost, kerr.NotLeaderForPartition},
	{raft.ErrNotLeader, kerr.NotLeaderForPartition},
	{raft.ErrEnqueueTimeout, kerr.RequestTimedOut},
	{context.DeadlineExceeded, kerr.RequestTimedOut},
	{context.Canceled, kerr.RequestTimedOut},
	// The log failed a write (a full disk): retriable, the partition
	// moves on to another leader.
	{log.ErrWrite, kerr.KafkaStorageError},
	{log.ErrCorruptBatch, kerr.CorruptMessage},
	{log.ErrBatchTooLarge, kerr.MessageTooLarge},
	{log.ErrOffsetOutOfRange, kerr.OffsetOutOfRange},
}

// wrapCode wraps err in the Kafka error code, keeping err's message.
func wrapCode(code *kerr.Error, err error) error {
	return fmt.Errorf("%w: %w", code, err)
}
