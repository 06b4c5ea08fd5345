package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftlog/raftlog/log"
)

func TestLogDump(t *testing.T) {
	dir := t.TempDir()
	l, err := log.Open(dir, log.WithConfig(log.Config{SegmentBytes: 2000, IndexIntervalBytes: 100}))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		recs := []log.Record{{Value: bytes.Repeat([]byte("v"), 200), Timestamp: int64(1000 + i)}}
		if _, err := l.AppendValidated([][]byte{log.BuildBatch(nil, log.BatchOptions{ProducerID: -1}, recs)}, 4); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"log", "dump", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s %s", code, out.String(), errb.String())
	}
	if got := strings.Count(out.String(), "baseOffset:"); got != 20 {
		t.Fatalf("%d batches listed:\n%s", got, out.String())
	}
	if !strings.Contains(out.String(), "indexes agree with the log") || !strings.Contains(out.String(), "crcOk: true") {
		t.Fatalf("output:\n%s", out.String())
	}
	// Corrupt a sealed segment's index: the dump must say so and fail.
	idx := filepath.Join(dir, "00000000000000000000.index")
	b, err := os.ReadFile(idx)
	if err != nil || len(b) < 8 {
		t.Fatalf("index: %v (%d bytes)", err, len(b))
	}
	b[len(b)-1] ^= 0x20
	os.WriteFile(idx, b, 0o644)
	out.Reset()
	if code := run([]string{"log", "dump", "--quiet", dir}, &out, &errb); code != 1 || !strings.Contains(out.String(), "PROBLEM") {
		t.Fatalf("exit %d on a corrupt index:\n%s", code, out.String())
	}
	// And a flipped byte in the log shows as a bad CRC.
	seg := filepath.Join(dir, "00000000000000000000.log")
	lb, _ := os.ReadFile(seg)
	lb[100] ^= 1
	os.WriteFile(seg, lb, 0o644)
	out.Reset()
	if code := run([]string{"log", "dump", seg}, &out, &errb); code != 1 || !strings.Contains(out.String(), "crcOk: false") {
		t.Fatalf("exit %d on a corrupt log:\n%s", code, out.String())
	}
}

// TestOperationsDocListsEveryFlag: the configuration reference in
// docs/operations.md is the generated table (`raftlog flag-table`).
func TestOperationsDocListsEveryFlag(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var tbl bytes.Buffer
	flagTable(&tbl)
	if !bytes.Contains(doc, tbl.Bytes()) {
		t.Fatalf("docs/operations.md does not hold the current flag table; regenerate it with `go run ./cmd/raftlog flag-table`:\n%s", tbl.String())
	}
}
