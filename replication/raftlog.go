package replication

import (
	"errors"

	"github.com/hashicorp/go-hclog"
)

// raftLogger is the logger given to Raft: Raft's errors about a peer
// that hosts no replica of the group (ErrGroupNotHosted: a replica being
// created or moved onto the peer has not started yet, or one removed has
// stopped) are logged at debug, since they are the normal course of a
// membership change and Raft retries them with a backoff.
type raftLogger struct{ hclog.Logger }

func newRaftLogger(l hclog.Logger) hclog.Logger { return raftLogger{l} }

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
	if notHosted(args) {
		l.Logger.Debug(msg, args...)
		return
	}
	l.Logger.Warn(msg, args...)
}

func (l raftLogger) Log(level hclog.Level, msg string, args ...any) {
	if level > hclog.Debug && notHosted(args) {
		level = hclog.Debug
	}
	l.Logger.Log(level, msg, args...)
}

func (l raftLogger) With(args ...any) hclog.Logger  { return raftLogger{l.Logger.With(args...)} }
func (l raftLogger) Named(name string) hclog.Logger { return raftLogger{l.Logger.Named(name)} }
func (l raftLogger) ResetNamed(name string) hclog.Logger {
	return raftLogger{l.Logger.ResetNamed(name)}
}
