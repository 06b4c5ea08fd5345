package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlog/raftlog/log/testkit"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// legacyFixture is the data directory of a `raftlog dev --kafka-port
// 29092 --exit` run by the release before the dense offset layout, its
// nodes' log left out (testdata/README.md says how it was made): topic
// demo, 3 partitions of 3 replicas, whose ten records sit at offsets 3 to
// 6 (partition 0) and 3 to 5 (partitions 1 and 2), after Raft's entries.
const legacyFixture = "testdata/legacy-dev-3nodes.tar.gz"

// A cluster started on a data directory of the release before the dense
// layout keeps serving its partitions as they were: no record renumbered
// (a consumer's committed offsets stay valid), new records after the old
// ones. A topic created after the upgrade is dense: its first record is
// at offset 0.
func TestUpgradeKeepsLegacyOffsets(t *testing.T) {
	dir := t.TempDir()
	if err := untar(legacyFixture, dir); err != nil {
		t.Fatal(err)
	}
	nodes, bootstrap, err := startDevNodes(dir, 3, 29092, testkit.Logger(t, hclog.Warn))
	if err != nil {
		t.Fatalf("start on the earlier release's data (are ports 29092-29394 free?): %v", err)
	}
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	want := map[int32][]int64{0: {3, 4, 5, 6}, 1: {3, 4, 5}, 2: {3, 4, 5}}
	got := readAll(ctx, t, bootstrap, "demo", 10)
	for p, offs := range want {
		if len(got[p]) != len(offs) {
			t.Fatalf("partition %d: offsets %v, want %v", p, got[p], offs)
		}
		for i, o := range offs {
			if got[p][i].Offset != o || !strings.HasPrefix(string(got[p][i].Value), "hello from raftlog") {
				t.Fatalf("partition %d: record %d at %d (%q), want offset %d", p, i, got[p][i].Offset, got[p][i].Value, o)
			}
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: "demo", Partition: 0, Value: []byte("after the upgrade")}).First()
	if err != nil || r.Offset <= 6 {
		t.Fatalf("a record produced after the upgrade: offset %d, %v", r.Offset, err)
	}
	// Every node ready: registered again, now with its features (the
	// earlier release registered none), so new topics are dense.
	for _, n := range nodes {
		testkit.WaitFor(t, "node ready", 60*time.Second, func() bool {
			resp, err := http.Get("http://" + n.HTTPAddr() + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 3, nil, "fresh"); err != nil {
		t.Fatal(err)
	}
	for i := int64(0); i < 2; i++ {
		var r *kgo.Record
		testkit.WaitFor(t, "a record produced to the new topic", 60*time.Second, func() bool {
			r, err = cl.ProduceSync(ctx, &kgo.Record{Topic: "fresh", Partition: 0, Value: []byte("v")}).First()
			return err == nil
		})
		if r.Offset != i {
			t.Fatalf("record %d of a topic created after the upgrade at offset %d", i, r.Offset)
		}
	}
}

// readAll reads n records of topic from the start, by partition.
func readAll(ctx context.Context, t *testing.T, bootstrap []string, topic string, n int) map[int32][]*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[int32][]*kgo.Record{}
	for got := 0; got < n; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s: %v", got, n, topic, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Partition] = append(out[r.Partition], r)
			got++
		})
	}
	return out
}

// untar extracts the gzipped tar file src into dir.
func untar(src, dir string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			out, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			out.Close()
			if err != nil {
				return err
			}
		}
	}
}
