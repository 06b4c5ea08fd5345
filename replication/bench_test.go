package replication

import (
	"context"
	"fmt"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
)

// BenchmarkReplicatedAppend: 3 replicas on loopback TCP through the shared
// transport, real files, acks=all, batches of 1 KiB records, with several
// producers at once (so Raft batches appends). BenchmarkLocalAppend is the
// reference in the same run: the same batches into one local log.
// docs/replication.md has the latest ratio and latencies.

const benchRecords = 16 // 1 KiB records per batch

func benchBatch() []byte {
	recs := make([]log.Record, benchRecords)
	for i := range recs {
		recs[i] = log.Record{Value: make([]byte, 1000), Timestamp: 1_700_000_000_000}
	}
	return log.BuildBatch(nil, log.BatchOptions{ProducerID: -1, BaseSequence: -1}, recs)
}

func BenchmarkLocalAppend(b *testing.B) {
	l, err := log.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { b.StopTimer(); l.Close() }()
	proto := benchBatch()
	bufs := make([][]byte, b.N)
	for i := range bufs {
		bufs[i] = append([]byte(nil), proto...)
	}
	b.SetBytes(int64(len(proto)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := l.AppendValidated([][]byte{bufs[i]}, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplicatedAppend appends 16 KiB batches to a 3-replica group
// on loopback and real files, acks=all, from 1 and 8 producers.
// transport=session sends the appends on the node-wide yamux session,
// transport=direct on direct connections (the default; see Mux).
func BenchmarkReplicatedAppend(b *testing.B) {
	for _, tr := range []struct {
		name  string
		limit int
	}{{"session", 0}, {"direct", DefaultDirectLimit}} {
		for _, producers := range []int{1, 8} {
			b.Run(fmt.Sprintf("transport=%s/producers=%d", tr.name, producers), func(b *testing.B) {
				benchReplicatedAppend(b, tr.limit, producers)
			})
		}
	}
}

func benchReplicatedAppend(b *testing.B, directLimit, producers int) {
	reps := benchGroup(b, 3, directLimit)
	var ld *Replica
	waitFor(b, "a leader", 20*time.Second, func() bool {
		for _, r := range reps {
			if r.IsLeader() {
				ld = r
				return true
			}
		}
		return false
	})
	proto := benchBatch()
	lat := make([]time.Duration, b.N)
	b.SetBytes(int64(len(proto)))
	b.ResetTimer()
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := 0
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= b.N {
					return
				}
				buf := append([]byte(nil), proto...)
				t0 := time.Now()
				if _, err := ld.Append(context.Background(), buf, AcksAll); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// benchGroup starts n replicas on real files and loopback, bootstrapped.
func benchGroup(b *testing.B, n, directLimit int) []*Replica {
	var reps []*Replica
	var servers []raft.Server
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		mux := NewMux(ln, "", WithDirectLimit(directLimit))
		r, err := Open(Config{Group: "bench-0", NodeID: fmt.Sprintf("b%d", i), Dir: b.TempDir(), Mux: mux, DenseOffsets: true,
			Logger: hclog.NewNullLogger(), Raft: RaftConfig{HeartbeatTimeout: 500 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond,
				LeaderLeaseTimeout: 250 * time.Millisecond, CommitTimeout: 2 * time.Millisecond}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { r.Close(); mux.Close() })
		reps = append(reps, r)
		servers = append(servers, raft.Server{ID: r.ServerID(), Address: r.Address(), Suffrage: raft.Voter})
	}
	if err := reps[0].Bootstrap(servers); err != nil {
		b.Fatal(err)
	}
	return reps
}
