package replication

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/log/vfs"
)

// TestMuxConnectionsDoNotGrowWithGroups: three nodes host 12 groups each;
// every group elects and commits through its append streams, and each
// node holds at most one outgoing
// and one incoming TCP connection per peer, whatever the number of groups.
func TestMuxConnectionsDoNotGrowWithGroups(t *testing.T) {
	const nodes, groups = 3, 12
	muxes := newTestMuxes(t, nodes)
	var all [][]*Replica
	for g := 0; g < groups; g++ {
		var reps []*Replica
		var servers []raft.Server
		for i, m := range muxes {
			r, err := Open(Config{Group: fmt.Sprintf("g-%d", g), NodeID: fmt.Sprintf("n%d", i), Dir: "/d", FS: vfs.NewMem(),
				IndexDir: t.TempDir(), Mux: m, Raft: testTimings(), Log: log.Config{SegmentIndexBytes: 4096}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Kill() })
			reps = append(reps, r)
			servers = append(servers, raft.Server{ID: r.ServerID(), Address: r.Address(), Suffrage: raft.Voter})
		}
		if err := reps[0].Bootstrap(servers); err != nil {
			t.Fatal(err)
		}
		all = append(all, reps)
	}
	// Each group commits a batch through whichever replica leads it (on a
	// loaded machine leadership can move between finding and appending).
	for g, reps := range all {
		waitFor(t, fmt.Sprintf("group %d to commit", g), 30*time.Second, func() bool {
			for _, r := range reps {
				if r.IsLeader() {
					if _, err := r.Append(shortCtx(t), testBatch(1, 10), AcksAll); err == nil {
						return true
					}
				}
			}
			return false
		})
	}
	// The appends came on the groups' append streams, not through msgpack:
	// every follower serves one, once its leader has reached it (a loaded
	// machine can be slow to, and leadership can move meanwhile).
	for g, reps := range all {
		waitFor(t, fmt.Sprintf("group %d: every follower to serve an append stream", g), 30*time.Second, func() bool {
			for _, r := range reps {
				if r.IsLeader() {
					continue
				}
				at := r.guard.Transport.(*appendTransport)
				at.mu.Lock()
				n := len(at.accepted)
				at.mu.Unlock()
				if n == 0 {
					return false
				}
			}
			return true
		})
	}
	for i, m := range muxes {
		m.mu.Lock()
		out, in := len(m.sessions), len(m.conns)
		m.mu.Unlock()
		if out > nodes-1 || in > nodes-1 {
			t.Fatalf("node %d: %d outgoing and %d incoming connections for %d groups", i, out, in, groups)
		}
	}
}

// TestMuxDialUnhostedGroup: a stream to a group the peer does not host
// fails at Dial, before anything is written into it (a large write into a
// stream nobody reads would block until the write deadline), and one to a
// hosted group carries bytes both ways.
func TestMuxDialUnhostedGroup(t *testing.T) {
	muxes := newTestMuxes(t, 2)
	if _, err := muxes[0].Dial("absent", muxes[1].Addr(), 5*time.Second); !errors.Is(err, ErrGroupNotHosted) {
		t.Fatalf("dial of a group not hosted: %v, want ErrGroupNotHosted", err)
	}

	layer, err := muxes[1].Layer("present")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		c, err := layer.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		buf := make([]byte, 5)
		if _, err := io.ReadFull(c, buf); err != nil {
			got <- nil
			return
		}
		c.Write([]byte("pong!"))
		got <- buf
	}()
	c, err := muxes[0].Dial("present", muxes[1].Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("ping!")); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, 5)
	if _, err := io.ReadFull(c, reply); err != nil || string(reply) != "pong!" {
		t.Fatalf("reply %q, %v", reply, err)
	}
	if b := <-got; string(b) != "ping!" {
		t.Fatalf("the acceptor read %q", b)
	}
}

// TestMuxGroupCloseAbortsStreams: a peer holds an open stream to a group
// (raft.NetworkTransport keeps them pooled per address); the group closes
// (its replica is dropped and opened again). The peer's read on the stream
// ends at once, and a large write into it (an InstallSnapshot) fails
// within the stream close timeout instead of blocking on the window until
// its own deadline.
func TestMuxGroupCloseAbortsStreams(t *testing.T) {
	muxes := newTestMuxes(t, 2)
	layer, err := muxes[1].Layer("g")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := layer.Accept()
			if err != nil {
				return
			}
			accepted <- c // held, never read: a handler waiting for its next request
		}
	}()
	reader, err := muxes[0].Dial("g", muxes[1].Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	writer, err := muxes[0].Dial("g", muxes[1].Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	<-accepted
	<-accepted
	layer.Close()

	reader.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := reader.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read on a stream of a closed group: %v, want it ended at once", err)
	}
	writer.SetWriteDeadline(time.Now().Add(30 * time.Second))
	start := time.Now()
	_, err = writer.Write(make([]byte, 16<<20))
	if err == nil || isTimeout(err) {
		t.Fatalf("a 16 MiB write into a stream of a closed group: %v after %v, want it reset", err, time.Since(start))
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// newTestMuxes starts n muxes on loopback, closed at the end of the test.
func newTestMuxes(t *testing.T, n int) []*Mux {
	t.Helper()
	muxes := make([]*Mux, n)
	for i := range muxes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		m := NewMux(ln, "")
		t.Cleanup(func() { m.Close() })
		muxes[i] = m
	}
	return muxes
}
