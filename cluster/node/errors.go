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
	case errors.Is(err, replication.ErrOutOfOrderSequence):
		return wrapCode(kerr.OutOfOrderSequenceNumber, err)
	case errors.Is(err, replication.ErrProducerFenced):
		return wrapCode(kerr.InvalidProducerEpoch, err)
	case errors.Is(err, replication.ErrDuplicateSequence):
		return wrapCode(kerr.DuplicateSequenceNumber, err)
	case errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, log.ErrClosed), errors.Is(err, os.ErrClosed),
		errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrNotLeader):
		// The replica is going away (topic deleted, node stopping,
		// leadership moving): clients retry elsewhere.
		return wrapCode(kerr.NotLeaderForPartition, err)
	case errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, context.Canceled):
		return wrapCode(kerr.RequestTimedOut, err)
	case errors.Is(err, log.ErrWrite):
		// The log failed a write (a full disk): retriable, the partition
		// moves on to another leader.
		return wrapCode(kerr.KafkaStorageError, err)
	case errors.Is(err, log.ErrCorruptBatch):
		return wrapCode(kerr.CorruptMessage, err)
	case errors.Is(err, log.ErrBatchTooLarge):
		return wrapCode(kerr.MessageTooLarge, err)
	case errors.Is(err, log.ErrOffsetOutOfRange):
		return wrapCode(kerr.OffsetOutOfRange, err)
	}
	return err
}

// wrapCode wraps err in the Kafka error code, keeping err's message.
func wrapCode(code *kerr.Error, err error) error {
	return fmt.Errorf("%w: %w", code, err)
}
