package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/log/vfs"
)

func TestReplicatedAppendThreeAndFive(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(map[int]string{3: "3", 5: "5"}[n], func(t *testing.T) {
			g := newTestGroup(t, n)
			ld := g.leader()
			a := acked{}
			g.produce(ld, a, 0, 50)
			g.checkConverged(a)
		})
	}
}

// A follower reads its leader's entries into chunks it reuses once the
// append is answered (entryArena). With each released chunk overwritten,
// anything that kept an entry past its append (a cache, the FSM, a new
// leader's replication of what it received as a follower) would store,
// apply or send garbage: the logs must still converge byte for byte
// through leader changes.
func TestFollowerEntriesOutliveNoAppend(t *testing.T) {
	needPoison(t)
	g := newTestGroup(t, 3)
	a := acked{}
	ld := g.leader()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for w := 0; w < 4; w++ { // concurrent appends: requests of several entries
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				b := testBatch(1000*w+i, 100+300*i)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				off, err := ld.rep.Append(ctx, b, AcksAll)
				cancel()
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					a[off] = b
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d appends failed, first: %v", len(errs), errs[0])
	}
	for round := 0; round < 2; round++ {
		ld := g.leader()
		g.stop(ld)
		g.produceTo(a, 5000+100*round, 30) // a former follower leads and replicates what it received
		g.start(ld)
	}
	g.checkConverged(a)
}

// Append returns when its context ends, though the commit it waits for
// has not come (the followers are gone and the leader still holds its
// lease, 300 ms here); the wait went on for the lease before.
func TestAppendEndsWithItsContext(t *testing.T) {
	g := newTestGroup(t, 3)
	ld := g.leader()
	g.produce(ld, acked{}, 0, 1)
	for _, nd := range g.nodes {
		if nd != ld {
			g.stop(nd)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := ld.rep.Append(ctx, testBatch(1, 100), AcksAll); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("append without a quorum: %v, want the context's deadline", err)
	}
}

func TestLeaderKillAndRestart(t *testing.T) {
	g := newTestGroup(t, 3)
	a := acked{}
	ld := g.leader()
	g.produce(ld, a, 0, 20)
	g.kill(ld)
	rest := g.others(ld)
	nl := g.leader(rest...)
	g.produce(nl, a, 20, 20)
	g.start(ld)
	g.produce(g.leader(), a, 40, 10)
	g.checkConverged(a)
	if ld.rep.Gated() {
		t.Fatal("a kill -9 restart on the same boot must not be gated")
	}
}

func TestPartitionMinorityAndMajority(t *testing.T) {
	g := newTestGroup(t, 5)
	a := acked{}
	ld := g.leader()
	g.produce(ld, a, 0, 10)
	// The leader alone in a minority: a new leader is elected in the
	// majority, the old one cannot commit.
	var minority, majority []*tnode
	for _, nd := range g.nodes {
		if nd == ld || (len(minority) < 2 && nd != ld && len(majority) >= 3) {
			minority = append(minority, nd)
		} else {
			majority = append(majority, nd)
		}
	}
	g.net.Partition(names(minority), names(majority))
	nl := g.leader(majority...)
	g.produce(nl, a, 10, 10)
	if _, err := ld.rep.Append(shortCtx(t), testBatch(999, 10), AcksAll); err == nil {
		t.Fatal("the old leader in a minority acknowledged a write")
	}
	g.net.Heal()
	g.produceTo(a, 20, 10)
	g.checkConverged(a)
	// A majority partition the other way round: the minority side now
	// holds the leader's followers only.
	ld = g.leader()
	var side []*tnode
	for _, nd := range g.nodes {
		if nd != ld && len(side) < 2 {
			side = append(side, nd)
		}
	}
	g.net.Partition(names(side), names(others(g.nodes, side)))
	g.produceTo(a, 30, 10)
	g.net.Heal()
	g.checkConverged(a)
}

// TestWipedReplicaRejoins: a replica whose disk was wiped comes back under
// a new Raft server id (its vote record is gone), is swapped in for its old
// identity by the leader, and catches up.
func TestWipedReplicaRejoins(t *testing.T) {
	g := newTestGroup(t, 3)
	a := acked{}
	ld := g.leader()
	g.produce(ld, a, 0, 30)
	victim := others(g.nodes, []*tnode{ld})[0]
	oldID := victim.rep.ServerID()
	g.kill(victim)
	victim.fs = vfs.NewMem()
	victim.idx = t.TempDir()
	g.start(victim)
	if victim.rep.ServerID() == oldID {
		t.Fatal("a wiped replica kept its server id")
	}
	if victim.rep.Gated() {
		t.Fatal("a wiped (new) replica has nothing to lose and must not be gated")
	}
	ld = g.leader()
	if err := ld.rep.RemoveServer(oldID); err != nil {
		t.Fatal(err)
	}
	if err := ld.rep.AddNonvoter(victim.rep.ServerID(), victim.rep.Address()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new replica to catch up", 20*time.Second, func() bool {
		return victim.rep.Log().EndOffset() == ld.rep.Log().EndOffset()
	})
	if err := ld.rep.AddVoter(victim.rep.ServerID(), victim.rep.Address()); err != nil {
		t.Fatal(err)
	}
	g.produce(ld, a, 30, 10)
	g.checkConverged(a)
}

// killFollower produces 10 batches (recorded in a), waits until every
// replica holds them, and kills a follower, which it returns.
func killFollower(g *tgroup, a acked) *tnode {
	g.t.Helper()
	ld := g.leader()
	g.produce(ld, a, 0, 10)
	lag := others(g.nodes, []*tnode{ld})[0]
	g.checkConverged(a)
	g.kill(lag)
	return lag
}

// TestCatchUpBySnapshotBehindRetention: a replica down while the leader's
// retention deleted the segments it needs (and Raft compacted its log)
// catches up through a snapshot that carries the retained data.
func TestCatchUpBySnapshotBehindRetention(t *testing.T) {
	g := newTestGroup(t, 3, func(g *tgroup) {
		g.raftCfg.TrailingLogs = 10
		g.logCfg = log.Config{SegmentBytes: 2048, SegmentIndexBytes: 4096, RetentionBytes: 8192}
	})
	lag := killFollower(g, acked{})
	g.produceTo(acked{}, 10, 200)
	ld := g.leader()
	if err := ld.rep.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if _, err := ld.rep.ApplyRetention(); err != nil {
		t.Fatal(err)
	}
	first, _ := ld.rep.store.FirstIndex()
	if first < 50 {
		t.Fatalf("raft log not compacted: first index %d", first)
	}
	if ld.rep.Log().StartOffset() == 0 {
		t.Fatal("retention deleted nothing")
	}
	g.start(lag)
	waitFor(t, "the lagging replica to catch up", 30*time.Second, func() bool {
		return lag.rep.Log().EndOffset() == ld.rep.Log().EndOffset()
	})
	if lag.rep.Log().StartOffset() != ld.rep.Log().StartOffset() {
		t.Fatalf("after the snapshot the replica starts at %d, the leader at %d", lag.rep.Log().StartOffset(), ld.rep.Log().StartOffset())
	}
	g.produce(g.leader(), acked{}, 300, 5)
	g.checkConverged(acked{})
}

// TestCleanRestartOfWholeGroup: after a clean shutdown of every replica, no
// data or term is lost, no replica is gated, and the logs reopen without a
// scan or an index rebuild.
func TestCleanRestartOfWholeGroup(t *testing.T) {
	g := newTestGroup(t, 3)
	a := acked{}
	g.produce(g.leader(), a, 0, 40)
	g.checkConverged(a)
	terms := map[string]uint64{}
	for _, nd := range g.nodes {
		terms[nd.name] = nd.rep.Term()
		g.stop(nd)
	}
	for _, nd := range g.nodes {
		g.start(nd)
		rec := nd.rep.Log().Recovery()
		if !rec.Clean || rec.ScannedSegments != 0 || rec.RebuiltIndexes != 0 {
			t.Fatalf("%s: reopen after a clean shutdown did recovery work: %+v", nd.name, rec)
		}
		if nd.rep.Term() < terms[nd.name] {
			t.Fatalf("%s lost its term", nd.name)
		}
		if nd.rep.Gated() {
			t.Fatalf("%s gated after a clean shutdown", nd.name)
		}
	}
	g.produce(g.leader(), a, 40, 5)
	g.checkConverged(a)
}

// TestSnapshotEndingInRaftEntries: a snapshot taken right after an
// election, when the log ends with Raft's own entries (a noop, a barrier)
// past the last command, restores on a lagging replica with exactly the
// leader's offsets: later batches land at the same offsets everywhere.
func TestSnapshotEndingInRaftEntries(t *testing.T) {
	g := newSnapshotGroup(t)
	a := acked{}
	ld := g.leader()
	g.produce(ld, a, 0, 10)
	lag := others(g.nodes, []*tnode{ld})[0]
	g.checkConverged(a)
	g.kill(lag)
	g.produce(ld, a, 10, 60)
	// A new leader: its log ends with its noop and barrier.
	var target *tnode
	for _, nd := range g.nodes {
		if nd.up && nd != ld {
			target = nd
		}
	}
	if err := ld.rep.TransferLeadership(target.rep.ServerID(), target.rep.Address()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new leader to be ready", 20*time.Second, func() bool { return target.rep.LeaderReady() })
	if err := target.rep.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if first, _ := target.rep.store.FirstIndex(); first < 20 {
		t.Fatalf("raft log not compacted: first index %d", first)
	}
	g.start(lag)
	g.produce(target, a, 70, 20)
	g.checkConverged(a)
}

// TestReplayCutShortByACrash: a replica that had compacted its Raft log
// far into its partition log falls behind the leader's log, receives a
// snapshot of the whole partition, and is killed while replaying it,
// after the replay restarted its log and wrote a few batches. Its anchor
// still names an offset of the old log, now past the log end; it must
// open, finish the replay from the snapshot it kept, and converge.
func TestReplayCutShortByACrash(t *testing.T) {
	g := newSnapshotGroup(t)
	a := acked{}
	lag := g.convergedFollower(a, 60)
	if err := lag.rep.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if oldAnchor := lag.rep.store.firstOffset(); oldAnchor < 50 {
		t.Fatalf("the replica's anchor is at %d: not compacted far", oldAnchor)
	}
	g.kill(lag)
	g.produceTo(a, 60, 40)
	if err := g.leader().rep.Snapshot(); err != nil {
		t.Fatal(err)
	}

	var (
		mu      sync.Mutex
		removed bool
		writes  int
	)
	tripped := make(chan struct{})
	errCut := errors.New("killed during the replay")
	lag.fs.SetHook(func(_ int, kind, name string) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case writes >= 3:
			return errCut
		case kind == vfs.OpRemove && strings.HasSuffix(name, ".log"):
			removed = true
		case removed && kind == vfs.OpWriteAt && strings.HasSuffix(name, ".log"):
			if writes++; writes == 3 {
				close(tripped)
				return errCut
			}
		}
		return nil
	})
	g.start(lag)
	select {
	case <-tripped:
	case <-time.After(30 * time.Second):
		t.Fatal("the lagging replica never replayed a snapshot")
	}
	g.kill(lag)
	lag.fs.SetHook(nil)
	g.start(lag)
	waitFor(t, "the replica to catch up after the replay", 30*time.Second, func() bool {
		return lag.rep.Log().EndOffset() == g.leader().rep.Log().EndOffset()
	})
	g.produce(g.leader(), a, 100, 5)
	g.checkConverged(a)
}

// TestReplayedSnapshotKeptItsData: a replica replays a received snapshot
// to its end, but dropping the snapshot's data fails (its metadata cannot
// be written), and it goes on to store entries after the snapshot. When it
// opens again it must not replay the snapshot a second time: that would
// cut the entries it stored (and acknowledged) since.
func TestReplayedSnapshotKeptItsData(t *testing.T) {
	g := newSnapshotGroup(t)
	a := acked{}
	lag := g.convergedFollower(a, 20)
	g.kill(lag)
	g.produceTo(a, 20, 30)
	if err := g.leader().rep.Snapshot(); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		removed bool
		failed  bool
	)
	lag.fs.SetHook(func(_ int, kind, name string) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case kind == vfs.OpRemove && strings.HasSuffix(name, ".log"):
			removed = true
		case removed && !failed && kind == vfs.OpRename && strings.Contains(name, "/snapshots/"):
			failed = true
			return errors.New("no space left on device")
		}
		return nil
	})
	g.start(lag)
	waitFor(t, "the replica to replay the snapshot and catch up", 30*time.Second, func() bool {
		mu.Lock()
		f := failed
		mu.Unlock()
		return f && lag.rep.Log().EndOffset() == g.leader().rep.Log().EndOffset()
	})
	lag.fs.SetHook(nil)
	g.produceTo(a, 50, 10)
	waitFor(t, "the replica to store the entries after the snapshot", 30*time.Second, func() bool {
		return lag.rep.Log().EndOffset() == g.leader().rep.Log().EndOffset()
	})
	before := lag.rep.Log().EndOffset()
	g.stop(lag)
	g.start(lag)
	if end := lag.rep.Log().EndOffset(); end < before {
		t.Fatalf("reopened with its log cut from %d to %d: the replayed snapshot was replayed again", before, end)
	}
	g.produce(g.leader(), a, 60, 5)
	g.checkConverged(a)
}

// newSnapshotGroup is a group of 3 whose Raft logs keep 5 entries past a
// snapshot, so that a replica left behind catches up by snapshot.
func newSnapshotGroup(t *testing.T) *tgroup {
	return newTestGroup(t, 3, func(g *tgroup) {
		g.raftCfg.TrailingLogs = 5
		g.logCfg = log.Config{SegmentBytes: 2048, SegmentIndexBytes: 4096}
	})
}

// convergedFollower produces n batches through the leader, waits until
// every replica holds them, and returns a follower.
func (g *tgroup) convergedFollower(a acked, n int) *tnode {
	ld := g.leader()
	g.produce(ld, a, 0, n)
	g.checkConverged(a)
	return others(g.nodes, []*tnode{ld})[0]
}

// TestEndOffsetForEpoch: over a log written in several terms (leadership
// moved between runs of appends), EndOffsetForEpoch's search answers
// every epoch as a walk of all the batch headers does.
func TestEndOffsetForEpoch(t *testing.T) {
	g := newTestGroup(t, 3)
	// Nothing written yet: the current epoch ends at the log end, an
	// earlier one where the log starts (Kafka's epoch cache answers so).
	if r := g.leader().rep; true {
		term := int32(r.Term())
		if end, e, err := r.EndOffsetForEpoch(term); err != nil || end != 0 || e != term {
			t.Fatalf("empty log, epoch %d: (%d, %d), %v", term, end, e, err)
		}
		if end, e, err := r.EndOffsetForEpoch(term - 1); err != nil || end != 0 || e != term-1 {
			t.Fatalf("empty log, epoch %d: (%d, %d), %v", term-1, end, e, err)
		}
		if end, e, err := r.EndOffsetForEpoch(-1); err != nil || end != -1 || e != -1 {
			t.Fatalf("empty log, no epoch: (%d, %d), %v", end, e, err)
		}
	}
	for round := range 4 {
		ld := g.leader()
		for i := range round + 3 { // 3, 4, 5, 6 batches of 1 to 3 records
			var recs []log.Record
			for j := range 1 + (round+i)%3 {
				recs = append(recs, log.Record{Value: []byte(fmt.Sprintf("r%d-%d-%d", round, i, j)), Timestamp: 1_700_000_000_000})
			}
			b := log.BuildBatch(nil, log.BatchOptions{ProducerID: -1, BaseSequence: -1}, recs)
			if _, err := ld.rep.Append(context.Background(), b, AcksAll); err != nil {
				t.Fatalf("round %d: append: %v", round, err)
			}
		}
		if err := ld.rep.TransferLeadership("", ""); err != nil {
			t.Fatalf("round %d: transfer: %v", round, err)
		}
	}
	ld := g.leader()
	g.produce(ld, acked{}, 100, 2)
	r := ld.rep
	bs := batches(t, r)
	hw, term := r.HighWatermark(), int32(r.Term())
	epochs := map[int32]bool{}
	for _, b := range bs {
		epochs[b.LeaderEpoch()] = true
	}
	if len(epochs) < 4 {
		t.Fatalf("the log holds %d epochs, want several", len(epochs))
	}
	for epoch := int32(-1); epoch <= term+1; epoch++ {
		wantEnd, wantEpoch := endOffsetForEpochByWalk(bs, hw, term, epoch)
		end, got, err := r.EndOffsetForEpoch(epoch)
		if err != nil {
			t.Fatalf("epoch %d: %v", epoch, err)
		}
		if end != wantEnd || got != wantEpoch {
			t.Fatalf("epoch %d: (%d, %d), want (%d, %d) (high watermark %d, term %d)", epoch, end, got, wantEnd, wantEpoch, hw, term)
		}
	}
}

// endOffsetForEpochByWalk answers OffsetForLeaderEpoch from every batch
// header in order: the end of the last batch of the largest epoch at most
// epoch below the high watermark (the high watermark for the current
// term), and that epoch; (-1, -1) when there is none.
func endOffsetForEpochByWalk(bs []log.Batch, hw int64, term, epoch int32) (int64, int32) {
	best, end := int32(-1), int64(-1)
	for _, b := range bs {
		if b.BaseOffset() >= hw || b.LeaderEpoch() > epoch {
			break
		}
		best, end = b.LeaderEpoch(), b.NextOffset()
	}
	if best < 0 {
		return -1, -1
	}
	if best == term || end > hw {
		end = hw
	}
	return end, best
}

// TestDeleteRecordsSurvivesPowerLoss: a replica that moved its log start
// keeps the batch at the new start through a power loss. The start is
// persisted at once (the log's checkpoint), so the log must be durable
// up to it first: otherwise the log comes back shorter than its start,
// the start falls back to the shorter end, and whatever the start pointed
// at (a metadata snapshot, for the controller) is gone from the replica.
func TestDeleteRecordsSurvivesPowerLoss(t *testing.T) {
	g := newTestGroup(t, 3)
	a := acked{}
	ld := g.leader()
	g.produce(ld, a, 0, 20)
	offs := make([]int64, 0, len(a))
	for off := range a {
		offs = append(offs, off)
	}
	slices.Sort(offs)
	cut := offs[10]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		start, err := ld.rep.DeleteRecords(ctx, cut)
		var nl *NotLeaderError
		if errors.As(err, &nl) {
			ld = g.leader() // a leader change: again through the new one
			continue
		}
		if err != nil || start != cut {
			t.Fatalf("delete records to %d: start %d, %v", cut, start, err)
		}
		break
	}
	var f *tnode
	for _, nd := range g.nodes {
		if nd != ld {
			f = nd
		}
	}
	waitFor(t, "the follower's log start to move", 10*time.Second, func() bool { return f.rep.Log().StartOffset() == cut })
	g.powerLoss(f, vfs.CrashOptions{})
	l, err := log.Open("/data/"+testGroup+"/log", log.WithFS(f.fs), log.WithIndexDir(f.idx), log.WithConfig(g.logCfg))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.StartOffset() != cut || l.EndOffset() <= cut {
		t.Fatalf("after the power loss the log is [%d, %d), want it to start at %d with that batch", l.StartOffset(), l.EndOffset(), cut)
	}
	b, err := l.ReadBatch(cut)
	if err != nil || !bytes.Equal(b, a[cut]) {
		t.Fatalf("the batch at the start after the power loss: %v", err)
	}
}

// TestCatchUpWithFrequentSnapshots: with Raft snapshots every 16 entries
// and 4 entries kept, a replica that was down while the log start moved
// (DeleteRecords) catches up through a snapshot and stays in step.
func TestCatchUpWithFrequentSnapshots(t *testing.T) {
	g := newTestGroup(t, 3, func(g *tgroup) {
		g.raftCfg.SnapshotThreshold, g.raftCfg.TrailingLogs, g.raftCfg.SnapshotInterval = 16, 4, 100*time.Millisecond
	})
	a := acked{}
	lag := killFollower(g, a)
	lagLast, _ := lag.rep.store.LastIndex()
	g.produceTo(a, 10, 100)
	// The leader compacts past what the lagging replica holds: it can
	// catch up only through a snapshot.
	waitFor(t, "the leader to compact past the lagging replica", 10*time.Second, func() bool {
		first, _ := g.leader().rep.store.FirstIndex()
		return first > lagLast+1
	})
	var ld *tnode
	for {
		ld = g.leader()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := ld.rep.DeleteRecords(ctx, ld.rep.HighWatermark()-30)
		cancel()
		if err == nil {
			break
		}
	}
	for off := range a {
		if off < ld.rep.Log().StartOffset() {
			delete(a, off)
		}
	}
	g.start(lag)
	g.produceTo(a, 110, 100)
	waitFor(t, "the lagging replica to catch up", 30*time.Second, func() bool {
		return lag.rep.Log().EndOffset() == g.leader().rep.Log().EndOffset()
	})
	g.checkConverged(a)
}

// TestRedundantInstallRefused: an install of a snapshot ending at an entry
// this replica holds with the same term, with entries past it, is refused
// (a removed server's leftover replication reaching the new incarnation at
// its address); one with another term, or past the log's end, is not; and
// the replica's own snapshots are never refused.
func TestRedundantInstallRefused(t *testing.T) {
	g := newTestGroup(t, 1)
	ld := g.leader()
	g.produce(ld, acked{}, 0, 10)
	st, snaps := ld.rep.store, ld.rep.snaps
	last, _ := st.LastIndex()
	var l raft.Log
	if err := st.GetLog(last-3, &l); err != nil {
		t.Fatal(err)
	}
	create := func(index, term uint64) error {
		sink, err := snaps.Create(1, index, term, raft.Configuration{}, 0, nil)
		if err == nil {
			sink.Cancel()
		}
		return err
	}
	if err := create(last-3, l.Term); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("a redundant install was not refused: %v", err)
	}
	if err := create(last-3, l.Term+1); err != nil {
		t.Fatalf("an install with another term: %v", err)
	}
	if err := create(last+5, l.Term); err != nil {
		t.Fatalf("an install past the log's end: %v", err)
	}
	// Raft calls Create alike for its own snapshots: the FSM's Snapshot
	// marks the one that follows as local.
	if _, err := ld.rep.fsm.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if err := create(last-3, l.Term); err != nil {
		t.Fatalf("the replica's own snapshot was refused: %v", err)
	}
	if err := create(last-3, l.Term); err == nil {
		t.Fatal("the mark outlived its snapshot")
	}
	if err := ld.rep.Snapshot(); err != nil {
		t.Fatalf("the replica's own snapshot: %v", err)
	}
}

// An idle group has nothing left to commit after an election: CommitLag
// is 0 on every replica. In the legacy layout its log ends in Raft's own
// entries (a new leader's no-op and barrier), which hold offsets past the
// high watermark; in the dense one they take none, and the log ends at
// the high watermark.
func TestCommitLagIdleAfterElection(t *testing.T) {
	for _, lay := range layouts {
		t.Run(lay.name, func(t *testing.T) {
			g := newTestGroup(t, 3, func(g *tgroup) { g.legacy = !lay.dense })
			a := acked{}
			ld := g.leader()
			g.produce(ld, a, 0, 5)
			g.kill(ld)
			rest := g.others(ld)
			nl := g.leader(rest...)
			waitFor(t, "the new leader's entries committed", 20*time.Second, func() bool {
				end, hw := nl.rep.Log().EndOffset(), nl.rep.HighWatermark()
				if lay.dense {
					return end == hw && hw == 5 && nl.rep.LeaderReady() && nl.rep.CommitLag() == 0
				}
				return end > hw && nl.rep.CommitLag() == 0
			})
			for _, nd := range rest {
				waitFor(t, "no commit lag on an idle follower", 20*time.Second, func() bool { return nd.rep.CommitLag() == 0 })
			}
			g.produce(nl, a, 5, 5)
			g.checkConverged(a)
		})
	}
}

// In the dense layout a producer's records are at offsets 0, 1, 2, ...
// across leader changes and restarts: Raft's own entries (configuration,
// each new leader's no-op and barrier) take none, on every replica.
func TestOffsetsDenseAcrossElections(t *testing.T) {
	g := newTestGroup(t, 3)
	a := acked{}
	ld := g.leader()
	g.produce(ld, a, 0, 5)
	g.kill(ld)
	nl := g.leader(g.others(ld)...)
	g.produce(nl, a, 5, 5)
	g.start(ld)
	g.kill(nl)
	g.produce(g.leader(g.others(nl)...), a, 10, 5)
	g.start(nl)
	g.checkConverged(a)
	for off := int64(0); off < 15; off++ {
		if _, ok := a[off]; !ok {
			t.Fatalf("no batch acknowledged at offset %d: %v", off, offsetsOf(a))
		}
	}
	for _, nd := range g.nodes {
		l := nd.rep.Log()
		// 15 batches of a record, and checkConverged's own.
		if l.StartOffset() != 0 || l.EndOffset() != 16 {
			t.Fatalf("%s: log [%d, %d), want [0, 16)", nd.name, l.StartOffset(), l.EndOffset())
		}
		if err := l.WalkBatches(0, func(b log.Batch) bool {
			if b.IsControl() {
				t.Errorf("%s: a control batch at %d", nd.name, b.BaseOffset())
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// offsetsOf lists the acknowledged base offsets.
func offsetsOf(a acked) []int64 {
	var out []int64
	for off := range a {
		out = append(out, off)
	}
	slices.Sort(out)
	return out
}

// TestCampaignElectsAtOnce: a bootstrapped replica that campaigns leads
// long before any heartbeat timeout of the group could run out.
func TestCampaignElectsAtOnce(t *testing.T) {
	g := newTestGroup(t, 3, func(g *tgroup) {
		g.raftCfg.HeartbeatTimeout, g.raftCfg.ElectionTimeout = time.Minute, time.Minute
	})
	if err := g.nodes[0].rep.Campaign(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "n0 to lead, well within the minute of its timeouts", 20*time.Second, func() bool {
		return g.nodes[0].rep.IsLeader()
	})
	// Campaign leaves the timeouts as they were.
	if rc := g.nodes[0].rep.Raft().ReloadableConfig(); rc.HeartbeatTimeout != time.Minute || rc.ElectionTimeout != time.Minute {
		t.Fatalf("timeouts after the campaign: %v, %v", rc.HeartbeatTimeout, rc.ElectionTimeout)
	}
}
