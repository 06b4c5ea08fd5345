package main

import (
	"fmt"
	"sort"
)

// The checker, after Jepsen's Kafka workload. A history is what the
// producers were told (every attempt, with the offset the broker
// acknowledged or the error) and what the readers saw (polls while running,
// and a final read of every partition from the start).

// Write is one produce attempt.
type Write struct {
	Producer  int
	Seq       int // per producer, increasing
	Partition int32
	Value     string
	Acked     bool  // the broker acknowledged it
	Offset    int64 // the acknowledged offset
	Err       string
	At, Took  float64 // seconds since the start, latency
}

// Read is one record a reader saw.
type Read struct {
	Reader    int
	Partition int32
	Offset    int64
	Value     string
	Final     bool // from the final read
	// Harness: one of the harness's own records (the warm-up), not part
	// of the history: it counts only where offsets are concerned (gap).
	Harness bool
}

// Anomaly is one violation found.
type Anomaly struct {
	Kind   string // lost, unreadable, duplicate, inconsistent-offset, reorder, gap, nonmonotonic-poll, unexpected
	Detail string
}

// Result is the checker's verdict.
type Result struct {
	Attempted, Acked, Failed int
	FinalRecords             int
	Counts                   map[string]int
	Examples                 []Anomaly // a few of each kind
	LinOps                   int       // register operations checked by porcupine
	LinResult                string    // Ok, Illegal or Unknown (timed out)
	// Bound holds what a coordinated power loss without per-append fsync
	// did (moved out of Counts: the documented bound, not an anomaly).
	Bound map[string]int
}

// OK reports whether no anomaly was found.
func (r Result) OK() bool {
	for _, n := range r.Counts {
		if n > 0 {
			return false
		}
	}
	return true
}

// Check checks a history. unread names the partitions the final read could
// not reach (no leader within its time limit): their acknowledged writes
// are unreadable, an availability failure, not lost ones.
func Check(writes []Write, reads []Read, unread map[int32]bool) Result {
	res := Result{Counts: map[string]int{"lost": 0, "unreadable": 0, "duplicate": 0, "inconsistent-offset": 0, "reorder": 0, "gap": 0, "nonmonotonic-poll": 0, "unexpected": 0}}
	perKind := map[string]int{}
	add := func(kind, format string, a ...any) {
		res.Counts[kind]++
		if perKind[kind] < 5 {
			perKind[kind]++
			res.Examples = append(res.Examples, Anomaly{Kind: kind, Detail: fmt.Sprintf(format, a...)})
		}
	}
	attempted := map[string]Write{}
	for _, w := range writes {
		res.Attempted++
		if w.Acked {
			res.Acked++
		} else {
			res.Failed++
		}
		// A value retried keeps its acknowledgement if any attempt had one.
		if prev, ok := attempted[w.Value]; !ok || (!prev.Acked && w.Acked) {
			attempted[w.Value] = w
		}
	}
	// The final read: one value per offset, per partition.
	type po struct {
		p int32
		o int64
	}
	atOffset := map[po]string{}
	finalCount := map[string]int{}
	var final []Read
	harness := map[po]bool{}
	for _, r := range reads {
		if r.Harness {
			if r.Final {
				harness[po{r.Partition, r.Offset}] = true
			}
			continue
		}
		if !r.Final {
			continue
		}
		k := po{r.Partition, r.Offset}
		if v, ok := atOffset[k]; ok {
			if v != r.Value {
				add("inconsistent-offset", "partition %d offset %d read as %q and %q", r.Partition, r.Offset, v, r.Value)
			}
			continue // the same record read twice by the final reader is not a duplicate
		}
		atOffset[k] = r.Value
		finalCount[r.Value]++
		final = append(final, r)
	}
	res.FinalRecords = len(final)
	// Polls while running must agree with the final read.
	for _, r := range reads {
		if r.Final {
			continue
		}
		if v, ok := atOffset[po{r.Partition, r.Offset}]; ok && v != r.Value {
			add("inconsistent-offset", "partition %d offset %d polled as %q, finally %q", r.Partition, r.Offset, r.Value, v)
		}
	}
	for v, n := range finalCount {
		if n > 1 {
			add("duplicate", "%q appears %d times", v, n)
		}
		if _, ok := attempted[v]; !ok {
			add("unexpected", "%q was read but never written", v)
		}
	}
	for _, w := range attempted {
		if !w.Acked {
			continue
		}
		if finalCount[w.Value] == 0 && unread[w.Partition] {
			add("unreadable", "%q acknowledged at partition %d offset %d, which the final read could not reach", w.Value, w.Partition, w.Offset)
			continue
		}
		if finalCount[w.Value] == 0 {
			add("lost", "%q acknowledged at partition %d offset %d, never read", w.Value, w.Partition, w.Offset)
			continue
		}
		if v, ok := atOffset[po{w.Partition, w.Offset}]; !ok || v != w.Value {
			add("inconsistent-offset", "%q acknowledged at partition %d offset %d, which holds %q", w.Value, w.Partition, w.Offset, v)
		}
	}
	// Per partition, in offset order, one producer's sequence numbers must
	// increase (writes are sequential per producer and partition).
	sort.Slice(final, func(i, j int) bool {
		if final[i].Partition != final[j].Partition {
			return final[i].Partition < final[j].Partition
		}
		return final[i].Offset < final[j].Offset
	})
	// Per partition, the final read's offsets are 0, 1, 2, ... with no
	// gap: a topic without transactions or compaction, as Kafka has it
	// (Raft's own entries take no offset).
	next := map[int32]int64{}
	for _, r := range final {
		want := next[r.Partition]
		for harness[po{r.Partition, want}] {
			want++
		}
		if r.Offset != want {
			add("gap", "partition %d: offset %d where %d was next", r.Partition, r.Offset, want)
		}
		next[r.Partition] = r.Offset + 1
	}
	last := map[[2]int]int{}
	for _, r := range final {
		w, ok := attempted[r.Value]
		if !ok {
			continue
		}
		k := [2]int{int(r.Partition), w.Producer}
		if prev, seen := last[k]; seen && w.Seq <= prev {
			add("reorder", "partition %d: producer %d seq %d at offset %d after seq %d", r.Partition, w.Producer, w.Seq, r.Offset, prev)
		}
		last[k] = w.Seq
	}
	// A reader's polls of a partition move forward.
	type rp struct {
		reader int
		p      int32
	}
	pos := map[rp]int64{}
	for _, r := range reads {
		if r.Final {
			continue
		}
		k := rp{r.Reader, r.Partition}
		if prev, ok := pos[k]; ok && r.Offset <= prev {
			add("nonmonotonic-poll", "reader %d partition %d: offset %d after %d", r.Reader, r.Partition, r.Offset, prev)
		}
		pos[k] = r.Offset
	}
	return res
}
