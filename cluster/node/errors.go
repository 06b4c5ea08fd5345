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

// The Kafka error codes of the node's own errors: what a replica, Raft or
// the log return is mapped here to the code a client must see, wrapped so
// that the message still says what happened. rpc maps what reaches it
// unwrapped (a *kerr.Error anywhere in the chain wins; the log's sentinels
// and expired contexts have codes of their own there).

// appendError maps an append's error to the Kafka error the producer must
// see.
func appendError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.As(err, new(*replication.NotLeaderError)):
		return kerr.NotLeaderForPartition
	case errors.Is(err, replication.ErrOutOfOrderSequence):
		return fmt.Errorf("%w: %v", kerr.OutOfOrderSequenceNumber, err)
	case errors.Is(err, replication.ErrProducerFenced):
		return fmt.Errorf("%w: %v", kerr.InvalidProducerEpoch, err)
	case errors.Is(err, replication.ErrDuplicateSequence):
		return fmt.Errorf("%w: %v", kerr.DuplicateSequenceNumber, err)
	}
	return retriable(err)
}

// retriable maps the errors of a replica going away (topic deleted, node
// shutting down, leadership moving) to codes clients retry on.
func retriable(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, log.ErrClosed), errors.Is(err, os.ErrClosed),
		errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrNotLeader):
		return fmt.Errorf("%w: %v", kerr.NotLeaderForPartition, err)
	case errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %v", kerr.RequestTimedOut, err)
	}
	return err
}

// deleteRecordsError maps a DeleteRecords error: a replica that lost the
// leadership answers NOT_LEADER_OR_FOLLOWER, as an append does.
func deleteRecordsError(err error) error {
	if errors.As(err, new(*replication.NotLeaderError)) {
		return fmt.Errorf("%w: %v", kerr.NotLeaderForPartition, err)
	}
	return retriable(err)
}
