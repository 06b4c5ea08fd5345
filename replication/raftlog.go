package replication

import (
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"
)

// raftLogger is the logger given to Raft: Raft's errors about a peer
// that hosts no replica of the group (ErrGroupNotHosted: a replica being
// created or moved onto the peer has not started yet, or one removed has
// stopped) are logged at debug, since they are the normal course of a
// membership change and Raft retries them with a backoff. So are its
// warnings of a new group's start: the first election of a group that
// never had a leader, a replica with no configuration yet waiting for its
// leader's first append instead of standing for election, a first
// candidate's election that timed out because its peers did not host the
// group yet, and the empty follower that the leader's first append finds
// (the leader then sends from entry 1).
type raftLogger struct {
	hclog.Logger
	// unled reports whether the group never had a leader here: its log
	// holds no more than the bootstrap configuration.
	unled func() bool
}

// routine reports whether a warning of Raft's is the normal start of a
// group (see raftLogger).
func (l raftLogger) routine(msg string, args []any) bool {
	switch msg {
	case "Election timeout reached, restarting election":
		return l.unled()
	case "heartbeat timeout reached, starting election":
		return argIs(args, "last-leader-id", "")
	case "no known peers, aborting election":
		return true
	case "failed to get previous log":
		return argIs(args, "last-index", "0")
	case "appendEntries rejected, sending older logs":
		return argIs(args, "next", "1")
	}
	return false
}

// argIs reports whether the key-value list has key with a value printed
// as want.
func argIs(args []any, key, want string) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && k == key {
			return fmt.Sprint(args[i+1]) == want
		}
	}
	return false
}

func newRaftLogger(l hclog.Logger, unled func() bool) hclog.Logger {
	return raftLogger{Logger: l, unled: unled}
}

func notHosted(args []any) bool {
	for i := 1; i < len(args); i += 2 {
		if err, ok := args[i].(error); ok && errors.Is(err, ErrGroupNotHosted) {
			return true
		}
	}
	return false
}

func (l raftLogger) Error(msg string, args ...any) {
	if notHosted(args) {
		l.Logger.Debug(msg, args...)
		return
	}
	l.Logger.Error(msg, args...)
}

func (l raftLogger) Warn(msg string, args ...any) {
	if notHosted(args) || l.routine(msg, args) {
		l.Logger.Debug(msg, args...)
		return
	}
	l.Logger.Warn(msg, args...)
}

func (l raftLogger) Log(level hclog.Level, msg string, args ...any) {
	if level > hclog.Debug && (notHosted(args) || level == hclog.Warn && l.routine(msg, args)) {
		level = hclog.Debug
	}
	l.Logger.Log(level, msg, args...)
}

func (l raftLogger) With(args ...any) hclog.Logger {
	return raftLogger{Logger: l.Logger.With(args...), unled: l.unled}
}
func (l raftLogger) Named(name string) hclog.Logger {
	return raftLogger{Logger: l.Logger.Named(name), unled: l.unled}
}
func (l raftLogger) ResetNamed(name string) hclog.Logger {
	return raftLogger{Logger: l.Logger.ResetNamed(name), unled: l.unled}
}
