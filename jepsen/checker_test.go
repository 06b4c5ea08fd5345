package main

import "testing"

func w(producer, seq int, p int32, v string, acked bool, off int64) Write {
	return Write{Producer: producer, Seq: seq, Partition: p, Value: v, Acked: acked, Offset: off}
}

func fr(p int32, off int64, v string) Read {
	return Read{Partition: p, Offset: off, Value: v, Final: true}
}

// Every rule of the checker finds its anomaly, and a clean history has
// none: a checker that cannot fail is not a checker.
func TestCheckerFindsEachAnomaly(t *testing.T) {
	clean := []Write{w(0, 1, 0, "a", true, 0), w(0, 2, 0, "b", true, 1), w(1, 1, 1, "c", false, -1)}
	cleanReads := []Read{fr(0, 0, "a"), fr(0, 1, "b")}
	if r := Check(clean, cleanReads, nil); !r.OK() {
		t.Fatalf("clean history flagged: %+v", r)
	}
	// An unacknowledged write that did land is fine too.
	if r := Check(clean, append(cleanReads, fr(1, 0, "c")), nil); !r.OK() {
		t.Fatalf("unacknowledged but present write flagged: %+v", r)
	}
	cases := map[string]struct {
		writes []Write
		reads  []Read
	}{
		"lost":                {clean, []Read{fr(0, 0, "a")}},
		"duplicate":           {clean, append(cleanReads, fr(0, 2, "b"))},
		"inconsistent-offset": {clean, []Read{fr(0, 0, "a"), fr(0, 1, "b"), {Reader: 1, Partition: 0, Offset: 1, Value: "a"}}},
		"unexpected":          {clean, append(cleanReads, fr(0, 2, "zzz"))},
		"reorder":             {[]Write{w(0, 1, 0, "a", true, 1), w(0, 2, 0, "b", true, 0)}, []Read{fr(0, 1, "a"), fr(0, 0, "b")}},
		"gap":                 {[]Write{w(0, 1, 0, "a", true, 0), w(0, 2, 0, "b", true, 2)}, []Read{fr(0, 0, "a"), fr(0, 2, "b")}},
		"nonmonotonic-poll": {clean, append(append([]Read(nil), cleanReads...),
			Read{Reader: 2, Partition: 0, Offset: 1, Value: "b"}, Read{Reader: 2, Partition: 0, Offset: 0, Value: "a"})},
	}
	for kind, c := range cases {
		r := Check(c.writes, c.reads, nil)
		if r.Counts[kind] == 0 {
			t.Errorf("%s not found: %+v", kind, r)
		}
	}
	// The harness's own records hold offsets and nothing else.
	warm := Read{Partition: 0, Offset: 0, Value: "warmup", Final: true, Harness: true}
	after := []Write{w(0, 1, 0, "a", true, 1), w(0, 2, 0, "b", true, 2)}
	if r := Check(after, []Read{warm, fr(0, 1, "a"), fr(0, 2, "b")}, nil); !r.OK() {
		t.Errorf("a warm-up record at offset 0 flagged: %+v", r)
	}
	if r := Check(after, []Read{fr(0, 1, "a"), fr(0, 2, "b")}, nil); r.Counts["gap"] == 0 {
		t.Errorf("offset 0 missing, and no gap found: %+v", r)
	}
	// Two warm-up records side by side (a retried warm-up lands twice).
	warm1 := warm
	warm1.Offset = 1
	later := []Write{w(0, 1, 0, "a", true, 2), w(0, 2, 0, "b", true, 3)}
	if r := Check(later, []Read{warm, warm1, fr(0, 2, "a"), fr(0, 3, "b")}, nil); !r.OK() {
		t.Errorf("two warm-up records at offsets 0 and 1 flagged: %+v", r)
	}
	// Only a final read's warm-up records excuse an offset: one seen by a
	// poll alone does not.
	polled := warm
	polled.Final = false
	if r := Check(after, []Read{polled, fr(0, 1, "a"), fr(0, 2, "b")}, nil); r.Counts["gap"] == 0 {
		t.Errorf("a warm-up record seen only by a poll excused offset 0: %+v", r)
	}
	// A partition the final read could not reach: its acknowledged writes
	// are unreadable, not lost.
	r := Check(clean, []Read{fr(0, 0, "a")}, map[int32]bool{0: true})
	if r.Counts["unreadable"] != 1 || r.Counts["lost"] != 0 || r.OK() {
		t.Errorf("write in an unreachable partition: %+v", r)
	}
	// An acknowledged offset that holds another value.
	r = Check([]Write{w(0, 1, 0, "a", true, 5)}, []Read{fr(0, 0, "a")}, nil)
	if r.Counts["inconsistent-offset"] == 0 {
		t.Errorf("acknowledged offset mismatch not found: %+v", r)
	}
}
