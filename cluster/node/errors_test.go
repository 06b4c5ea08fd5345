package node

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/replication"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Every error a replica, Raft or the log return reaches a client as the
// Kafka code it must switch on, however wrapped, with its message kept.
func TestKafkaErr(t *testing.T) {
	for _, c := range []struct {
		err  error
		code *kerr.Error
	}{
		{&replication.NotLeaderError{}, kerr.NotLeaderForPartition},
		{fmt.Errorf("append: %w", replication.ErrOutOfOrderSequence), kerr.OutOfOrderSequenceNumber},
		{replication.ErrProducerFenced, kerr.InvalidProducerEpoch},
		{replication.ErrDuplicateSequence, kerr.DuplicateSequenceNumber},
		{raft.ErrRaftShutdown, kerr.NotLeaderForPartition},
		{raft.ErrLeadershipLost, kerr.NotLeaderForPartition},
		{raft.ErrNotLeader, kerr.NotLeaderForPartition},
		{fmt.Errorf("read: %w", log.ErrClosed), kerr.NotLeaderForPartition},
		{raft.ErrEnqueueTimeout, kerr.RequestTimedOut},
		{fmt.Errorf("apply: %w", context.DeadlineExceeded), kerr.RequestTimedOut},
		{fmt.Errorf("replication: store entries 1-1: %w", fmt.Errorf("wrapped: %w", log.ErrWrite)), kerr.KafkaStorageError},
		{fmt.Errorf("log: batch 0: %w", log.ErrCorruptBatch), kerr.CorruptMessage},
		{fmt.Errorf("%w: big", log.ErrBatchTooLarge), kerr.MessageTooLarge},
		{fmt.Errorf("%w: 9", log.ErrOffsetOutOfRange), kerr.OffsetOutOfRange},
		// A code the cluster chose wins over what else the chain holds.
		{fmt.Errorf("%w: %w", kerr.InvalidConfig, context.DeadlineExceeded), kerr.InvalidConfig},
	} {
		got := kafkaErr(c.err)
		var ke *kerr.Error
		if !errors.As(got, &ke) || ke != c.code {
			t.Errorf("kafkaErr(%v) = %v, want %v", c.err, got, c.code)
			continue
		}
		if !errors.Is(got, c.err) {
			t.Errorf("kafkaErr(%v) = %v lost the cause", c.err, got)
		}
	}
	if kafkaErr(nil) != nil {
		t.Error("an error from nil")
	}
	// An error the node does not know stays unmapped: rpc answers it as
	// UNKNOWN_SERVER_ERROR and logs it.
	other := errors.New("disk on fire")
	if got := kafkaErr(other); got != other {
		t.Errorf("kafkaErr(other) = %v", got)
	}
}
