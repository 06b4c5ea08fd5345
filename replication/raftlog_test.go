package replication

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// Raft's complaints about a peer that hosts no replica yet are debug
// lines; its other errors stay errors, in derived loggers too.
func TestRaftLoggerQuietsNotHosted(t *testing.T) {
	var buf bytes.Buffer
	unled := true
	l := newRaftLogger(hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &buf}), func() bool { return unled }).Named("raft").With("group", "t-0")
	l.Error("failed to heartbeat to", "peer", "p", "error", fmt.Errorf("%w: group %q at %s", ErrGroupNotHosted, "t-0", "p"))
	l.Warn("failed to appendEntries to", "error", ErrGroupNotHosted)
	l.Log(hclog.Error, "failed to send snapshot to", "error", ErrGroupNotHosted)
	if buf.Len() != 0 {
		t.Fatalf("not-hosted errors logged above debug:\n%s", buf.String())
	}
	// A new group's first election and its empty followers.
	l.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "", "last-leader-id", "")
	l.Warn("failed to get previous log", "previous-index", 1, "last-index", uint64(0), "error", "log not found")
	l.Warn("appendEntries rejected, sending older logs", "peer", "p", "next", uint64(1))
	l.Warn("no known peers, aborting election")
	l.Warn("Election timeout reached, restarting election")
	if buf.Len() != 0 {
		t.Fatalf("a new group's start logged above debug:\n%s", buf.String())
	}
	// The same after the group ran: a leader lost, a follower behind, an
	// election that found no quorum.
	unled = false
	l.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "a", "last-leader-id", "n1")
	l.Warn("appendEntries rejected, sending older logs", "peer", "p", "next", uint64(70))
	l.Warn("Election timeout reached, restarting election")
	if strings.Count(buf.String(), "[WARN]") != 3 {
		t.Fatalf("warnings of a running group lost:\n%s", buf.String())
	}
	l.Error("failed to get log", "error", errors.New("disk on fire"))
	if !strings.Contains(buf.String(), "[ERROR] raft: failed to get log") {
		t.Fatalf("other errors lost:\n%s", buf.String())
	}
}
