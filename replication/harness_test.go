package replication

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/log/testkit"
	"github.com/raftlog/raftlog/log/vfs"
	"github.com/raftlog/raftlog/replication/faultnet"
)

// A group of replicas in one test process, each on its own node (its own
// Mux on a loopback port, its own crashable MemFS), linked through a
// fault-injecting network.

const testGroup = "t-0"

type tnode struct {
	name  string
	addr  string
	fs    *vfs.MemFS
	idx   string
	boot  string
	boots int
	gate  string // Config.Gate of its next start
	mux   *Mux
	q     *Quiescer // when the group quiesces
	rep   *Replica
	up    bool
}

// down closes what a node runs besides its replica.
func (nd *tnode) down() {
	if nd.q != nil {
		nd.q.Close()
		nd.q = nil
	}
	nd.mux.Close()
	nd.up = false
}

type tgroup struct {
	t       testing.TB
	net     *faultnet.Network
	nodes   []*tnode
	logCfg  log.Config
	raftCfg RaftConfig
	// noGuard models nodes without the vote guard: a power loss keeps
	// the boot id, so a node cannot tell it from a crash, after which
	// the guard has nothing to hold.
	noGuard bool
	// legacy opens the replicas in the legacy offset layout (Raft's own
	// entries take offsets); the default is the dense one.
	legacy bool
	// quiesce gives every node a Quiescer of these timings.
	quiesce *QuiescerConfig
	// noVotes names the nodes whose mux serves no vote streams, as a node
	// that predates them.
	noVotes map[string]bool
	// muxOpts are given to every node's mux after the harness's own.
	muxOpts []MuxOption
	logger  hclog.Logger
}

func testTimings() RaftConfig {
	return RaftConfig{
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
		// A lease as long as the heartbeat timeout: on a loaded 2-core
		// machine under -race a leader missing its followers for 150 ms
		// stepped down in the middle of a test.
		LeaderLeaseTimeout: 300 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
		SnapshotInterval: time.Hour, SnapshotThreshold: 1 << 30, TrailingLogs: 1 << 20,
	}
}

func newTestGroup(t testing.TB, n int, opts ...func(*tgroup)) *tgroup {
	t.Helper()
	g := &tgroup{t: t, net: faultnet.New(), raftCfg: testTimings(),
		logCfg: log.Config{SegmentBytes: 64 << 10, SegmentIndexBytes: 64 << 10}}
	g.logger = testkit.Logger(t, hclog.Warn)
	t.Cleanup(func() {
		for _, nd := range g.nodes {
			if nd.up {
				nd.rep.Kill()
				nd.down()
			}
		}
	})
	for _, o := range opts {
		o(g)
	}
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		nd := &tnode{name: fmt.Sprintf("n%d", i), addr: ln.Addr().String(), fs: vfs.NewMem(), idx: t.TempDir(), boot: "boot-1"}
		g.nodes = append(g.nodes, nd)
		g.startOn(nd, ln)
	}
	var servers []raft.Server
	for _, nd := range g.nodes {
		servers = append(servers, raft.Server{ID: nd.rep.ServerID(), Address: nd.rep.Address(), Suffrage: raft.Voter})
	}
	if err := g.nodes[0].rep.Bootstrap(servers); err != nil {
		t.Fatal(err)
	}
	return g
}

func (g *tgroup) startOn(nd *tnode, ln net.Listener) {
	g.t.Helper()
	opts := append([]MuxOption{WithDialer(g.net.Dialer(nd.addr)), WithMuxLogger(g.logger.Named(nd.name))}, g.muxOpts...)
	nd.mux = NewMux(ln, nd.addr, opts...)
	if g.noVotes[nd.name] {
		nd.mux.votes.close()
		nd.mux.votes = nil
	}
	if g.quiesce != nil {
		qc := *g.quiesce
		qc.Logger = g.logger.Named(nd.name)
		var err error
		if nd.q, err = NewQuiescer(nd.mux, qc); err != nil {
			g.t.Fatal(err)
		}
	}
	rep, err := Open(Config{
		Group: testGroup, NodeID: nd.name, Dir: "/data/" + testGroup, FS: nd.fs, IndexDir: nd.idx,
		Log: g.logCfg, Mux: nd.mux, Quiescer: nd.q, Logger: g.logger.Named(nd.name), BootID: nd.boot, Raft: g.raftCfg,
		Gate: nd.gate, DenseOffsets: !g.legacy,
	})
	if err != nil {
		nd.down()
		g.t.Fatalf("open %s: %v", nd.name, err)
	}
	nd.rep, nd.up = rep, true
}

// start restarts a stopped node on its address.
func (g *tgroup) start(nd *tnode) {
	g.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln, err := net.Listen("tcp", nd.addr)
		if err == nil {
			g.startOn(nd, ln)
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("relisten %s: %v", nd.addr, err)
		}
		time.Sleep(20 * time.Millisecond) // the port is being released: retry until the deadline
	}
}

// stop shuts a node down cleanly.
func (g *tgroup) stop(nd *tnode) {
	g.t.Helper()
	if err := nd.rep.Close(); err != nil {
		g.t.Fatalf("close %s: %v", nd.name, err)
	}
	nd.down()
}

// kill stops a node as kill -9 would: the page cache (here, the MemFS
// with its unsynced bytes) survives.
func (g *tgroup) kill(nd *tnode) {
	if nd.q != nil {
		nd.q.Close() // first: a crash tells its peers nothing
	}
	nd.rep.Kill()
	nd.down()
}

// powerLoss kills a node and drops every byte it had not fsynced; it comes
// back on a new kernel boot (the same one with noGuard).
func (g *tgroup) powerLoss(nd *tnode, opts vfs.CrashOptions) {
	g.kill(nd)
	nd.fs = nd.fs.CrashClone(opts)
	if g.noGuard {
		return
	}
	nd.boots++
	nd.boot = fmt.Sprintf("boot-%d", nd.boots+1)
}

func (g *tgroup) addrs() []string {
	var out []string
	for _, nd := range g.nodes {
		out = append(out, nd.addr)
	}
	return out
}

// waitFor is testkit.WaitFor.
var waitFor = testkit.WaitFor

// leader waits until exactly one running node among among leads, and every
// running node among them agrees it does not.
// others is every node of g but nd.
func (g *tgroup) others(nd *tnode) []*tnode {
	var rest []*tnode
	for _, o := range g.nodes {
		if o != nd {
			rest = append(rest, o)
		}
	}
	return rest
}

func (g *tgroup) leader(among ...*tnode) *tnode {
	g.t.Helper()
	if len(among) == 0 {
		among = g.nodes
	}
	var found *tnode
	waitFor(g.t, "a leader", 20*time.Second, func() bool {
		found = nil
		for _, nd := range among {
			if nd.up && nd.rep.IsLeader() {
				if found != nil {
					return false
				}
				found = nd
			}
		}
		return found != nil
	})
	return found
}

func testBatch(i int, size int) []byte {
	v := bytes.Repeat([]byte{byte('a' + i%26)}, size)
	return log.BuildBatch(nil, log.BatchOptions{ProducerID: -1, BaseSequence: -1},
		[]log.Record{{Key: []byte(fmt.Sprintf("k%d", i)), Value: v, Timestamp: 1_700_000_000_000 + int64(i)}})
}

// acked maps the base offset of every acknowledged batch to its bytes.
type acked map[int64][]byte

// produce appends n batches through nd with acks=all and records them.
func (g *tgroup) produce(nd *tnode, a acked, from, n int) {
	g.t.Helper()
	for i := from; i < from+n; i++ {
		b := testBatch(i, 100)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		off, err := nd.rep.Append(ctx, b, AcksAll)
		cancel()
		if err != nil {
			g.t.Fatalf("append %d on %s: %v", i, nd.name, err)
		}
		a[off] = b // rewritten in place: what the log holds
	}
}

// produceTo keeps producing through whichever node leads until n batches
// are acknowledged (a leader change in between is retried), for at most
// a minute.
func (g *tgroup) produceTo(a acked, from, n int) {
	g.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for i := from; i < from+n; {
		nd := g.leader()
		b := testBatch(i, 100)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		off, err := nd.rep.Append(ctx, b, AcksAll)
		cancel()
		if err != nil {
			if time.Now().After(deadline) {
				g.t.Fatalf("%d of %d batches acknowledged in a minute; the last append failed: %v", i-from, n, err)
			}
			continue
		}
		a[off] = b
		i++
	}
}

// batches reads the whole log of a replica (up to its log end, committed
// or not).
func batches(t testing.TB, r *Replica) []log.Batch {
	t.Helper()
	l := r.Log()
	var out []log.Batch
	off, end := l.StartOffset(), l.EndOffset()
	for off < end {
		p, err := l.Read(off, 1<<20, end)
		if err != nil {
			t.Fatalf("read %d: %v", off, err)
		}
		log.Batches(p, func(b log.Batch) bool {
			if b.LastOffset() >= off {
				out = append(out, append(log.Batch(nil), b...))
				off = b.NextOffset()
			}
			return true
		})
	}
	return out
}

// checkConverged waits until every running replica holds the same log as
// the leader up to the leader's high watermark, then checks that every
// acknowledged batch is in it at its offset with its bytes, and that the
// logs are byte-identical.
func (g *tgroup) checkConverged(a acked) {
	g.t.Helper()
	ld := g.leader()
	// Commit a barrier so the high watermark covers everything.
	g.produce(ld, acked{}, 100000, 1)
	hw := ld.rep.HighWatermark()
	for _, nd := range g.nodes {
		if !nd.up {
			continue
		}
		waitFor(g.t, nd.name+" to catch up", 20*time.Second, func() bool {
			return nd.rep.Log().EndOffset() == ld.rep.Log().EndOffset() && nd.rep.HighWatermark() >= hw
		})
	}
	want := batches(g.t, ld.rep)
	byOff := map[int64]log.Batch{}
	for _, b := range want {
		byOff[b.BaseOffset()] = b
	}
	for off, b := range a {
		got, ok := byOff[off]
		if !ok {
			g.t.Fatalf("acknowledged batch at offset %d is missing on the leader %s", off, ld.name)
		}
		if !bytes.Equal(got, b) {
			g.t.Fatalf("acknowledged batch at offset %d differs on the leader %s", off, ld.name)
		}
	}
	for _, nd := range g.nodes {
		if !nd.up || nd == ld {
			continue
		}
		got := batches(g.t, nd.rep)
		n := min(len(got), len(want))
		// Both logs may start at different offsets (retention): align.
		i, j := 0, 0
		for i < len(got) && j < len(want) && got[i].BaseOffset() != want[j].BaseOffset() {
			if got[i].BaseOffset() < want[j].BaseOffset() {
				i++
			} else {
				j++
			}
		}
		for ; i < len(got) && j < len(want); i, j = i+1, j+1 {
			if !bytes.Equal(got[i], want[j]) {
				g.t.Fatalf("%s and leader %s differ at offset %d", nd.name, ld.name, got[i].BaseOffset())
			}
		}
		if n == 0 && len(want) > 0 {
			g.t.Fatalf("%s holds no batch", nd.name)
		}
	}
}
