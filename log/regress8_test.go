package log

import (
	"testing"

	"github.com/raftlog/raftlog/log/vfs"
)

// With flush.messages=1 every append is fsynced, and the checkpoint on
// disk says so at once (not only when a segment rolls): a reader of the
// directory, such as the chaos harness emulating a power loss, knows the
// fsynced prefix exactly. Recovery after a crash then scans nothing.
func TestCheckpointFollowsEveryFlush(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{FlushMessages: 1}
	l := openTest(t, dir, cfg)
	for i := 0; i < 5; i++ {
		info := mustAppend(t, l, mkBatch(3, 10, int64(i)))
		ck, err := readCheckpoint(vfs.OS, dir)
		if err != nil {
			t.Fatal(err)
		}
		if want := info.LastOffset + 1; ck.recoveryPoint != want {
			t.Fatalf("append %d: checkpoint recovery point %d, want %d", i, ck.recoveryPoint, want)
		}
	}
	l.Abort() // a crash: no clean-shutdown marker
	l2 := openTest(t, dir, cfg)
	defer l2.Close()
	if rep := l2.Recovery(); rep.CheckpointError != "" || rep.RecoveryPoint != l2.EndOffset() {
		t.Fatalf("recovery after the crash: %+v (end %d)", rep, l2.EndOffset())
	}
}
