package bench

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kfake"
	"golang.org/x/sys/unix"
	"gonum.org/v1/plot/vg"
)

func TestHistogramQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	var vals []time.Duration
	for i := 0; i < 100_000; i++ {
		// Log-uniform from 1 ns to about 10 s.
		v := time.Duration(math.Exp(rng.Float64() * math.Log(1e10)))
		vals = append(vals, v)
		h.Record(v)
	}
	h.Record(-5) // counts as zero
	vals = append(vals, 0)
	slices.Sort(vals)
	for _, q := range []float64{0, 0.001, 0.5, 0.9, 0.99, 0.999, 1} {
		rank := max(int(math.Ceil(q*float64(len(vals)))), 1)
		want := vals[rank-1]
		got := h.Quantile(q)
		if diff := math.Abs(float64(got - want)); diff > float64(want)/64+1 {
			t.Errorf("q%v = %v, want %v ± 1/64", q, got, want)
		}
	}
	if h.Max() != vals[len(vals)-1] {
		t.Errorf("max %v, want %v", h.Max(), vals[len(vals)-1])
	}
	if h.Count() != uint64(len(vals)) {
		t.Errorf("count %d, want %d", h.Count(), len(vals))
	}
	var m Histogram
	m.Merge(&h)
	if m.Quantile(0.99) != h.Quantile(0.99) || m.Count() != h.Count() || m.Max() != h.Max() {
		t.Error("merge differs from its source")
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Mean() != 0 {
		t.Error("empty histogram has a quantile")
	}
}

func TestHistogramBuckets(t *testing.T) {
	for i := 0; i < histIndex(math.MaxInt64); i++ {
		lo := histLow(i)
		if histIndex(lo) != i {
			t.Fatalf("bucket %d: low %d maps to %d", i, lo, histIndex(lo))
		}
		if hi := histLow(i+1) - 1; hi >= lo && histIndex(hi) != i {
			t.Fatalf("bucket %d: high %d maps to %d", i, hi, histIndex(hi))
		}
	}
	if i := histIndex(math.MaxInt64); i >= histBuckets {
		t.Fatalf("max value in bucket %d of %d", i, histBuckets)
	}
}

func TestStamp(t *testing.T) {
	v := make([]byte, 100)
	now := time.Unix(0, 1_700_000_000_123_456_789)
	stamp(v, now)
	if got, ok := stamped(v); !ok || !got.Equal(now) {
		t.Fatalf("stamped = %v %v, want %v", got, ok, now)
	}
	short := make([]byte, stampLen-1)
	stamp(short, now)
	if _, ok := stamped(short); ok || !bytes.Equal(short, make([]byte, stampLen-1)) {
		t.Fatal("a value shorter than the stamp was stamped")
	}
	if _, ok := stamped(make([]byte, 64)); ok {
		t.Fatal("a value without the magic reads as stamped")
	}
}

func kfakeConfig(t *testing.T) Config {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return Config{Bootstrap: c.ListenAddrs(), Topic: "t", Partitions: 3, Replication: -1, Size: 100,
		Duration: 30 * time.Second, Acks: -1, Producers: 2}
}

func TestProduceConsume(t *testing.T) {
	ctx := context.Background()
	c := kfakeConfig(t)
	n, created, err := EnsureTopic(ctx, c)
	if err != nil || n != 3 || !created {
		t.Fatalf("EnsureTopic = %d %v %v, want 3 partitions created", n, created, err)
	}
	if n, created, err := EnsureTopic(ctx, c); err != nil || n != 3 || created {
		t.Fatalf("EnsureTopic again = %d %v %v, want 3 partitions found", n, created, err)
	}
	c.Records = 5000
	var calls int
	c.Progress = func(recs, bytes int64) { calls++ }
	p, err := Produce(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if p.Records != c.Records || p.Errors != 0 || p.Bytes != c.Records*int64(c.Size) || p.Partitions != 3 {
		t.Fatalf("produce: %+v", p)
	}
	if p.Latency.N != uint64(p.Records) || p.Latency.P50 <= 0 || p.Latency.P50 > p.Latency.P99 || p.Latency.P99 > p.Latency.Max {
		t.Fatalf("produce latency: %+v", p.Latency)
	}
	if calls == 0 {
		t.Fatal("progress never called")
	}
	c.Records = 0
	got, err := Consume(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if got.Records != p.Records || got.Bytes != p.Bytes || got.Errors != 0 {
		t.Fatalf("consume: %+v, produced %d", got, p.Records)
	}
	if got.EndToEnd.N != 0 {
		t.Fatalf("end-to-end measured on records older than the consume: %+v", got.EndToEnd)
	}
	c.Records = 1234
	if got, err := Consume(ctx, c); err != nil || got.Records != 1234 {
		t.Fatalf("consume bounded at 1234: %+v %v", got, err)
	}
	var buf bytes.Buffer
	got.WriteSummary(&buf)
	if !bytes.Contains(buf.Bytes(), []byte("errors: 0")) {
		t.Fatalf("summary:\n%s", buf.String())
	}
}

func TestConsumeFromEnd(t *testing.T) {
	ctx := context.Background()
	c := kfakeConfig(t)
	if _, _, err := EnsureTopic(ctx, c); err != nil {
		t.Fatal(err)
	}
	cc := c
	cc.FromEnd, cc.Records = true, 100
	done := make(chan Result, 1)
	go func() {
		r, err := Consume(ctx, cc)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	pc := c
	pc.Records, pc.Producers = 50, 1
	// The consumer starts at the end it finds: produce until it has seen
	// its count (bounded).
	for i := 0; ; i++ {
		select {
		case r := <-done:
			if r.Records != 100 || r.EndToEnd.N != 100 || r.EndToEnd.P50 <= 0 {
				t.Fatalf("consume from the end: %+v", r)
			}
			return
		default:
		}
		if i == 1000 {
			t.Fatal("the consumer saw fewer than 100 records of 50000")
		}
		if _, err := Produce(ctx, pc); err != nil {
			t.Fatal(err)
		}
	}
}

func TestProduceRate(t *testing.T) {
	ctx := context.Background()
	c := kfakeConfig(t)
	if _, _, err := EnsureTopic(ctx, c); err != nil {
		t.Fatal(err)
	}
	c.Rate, c.Duration, c.Timeline = 2000, 300*time.Millisecond, true
	// With a warm-up as long as the run, what it sent is not counted: the
	// limits are the same.
	for _, warmup := range []time.Duration{0, c.Duration} {
		c.Warmup = warmup
		p, err := Produce(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		// A step for every TimelineStep of the run; each step's worst is
		// at most the run's, and the worst of them is the run's.
		if len(p.Timeline) != int(c.Duration/TimelineStep)+1 || slices.Max(p.Timeline) != p.Latency.Max {
			t.Fatalf("warm-up %v: timeline %v, max %v", warmup, p.Timeline, p.Latency.Max)
		}
		// Pacing can only hold records back: never more than the
		// schedule. (A fifth more for timers that fire late on a busy
		// machine.)
		if limit := int64(1.2*c.Rate*c.Duration.Seconds()) + int64(c.Producers); p.Records > limit || p.Records == 0 {
			t.Fatalf("warm-up %v: rate %v for %v: %d records, want 1..%d", warmup, c.Rate, c.Duration, p.Records, limit)
		}
	}
}

// TestFillPageCache: the sparse file is read whole, every page of it ends
// up in the page cache, it stays until removed, and leaving more than
// is free fills nothing.
func TestFillPageCache(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/meminfo and mincore are Linux's")
	}
	free, err := FreeMemory()
	if err != nil || free <= 0 {
		t.Fatalf("FreeMemory = %d, %v", free, err)
	}
	dir := t.TempDir()
	const size = 8 * RawChunk
	filled, remove, err := readSparse(dir, size)
	if err != nil || filled != size {
		t.Fatalf("readSparse(%d) = %d, %v", size, filled, err)
	}
	names, _ := os.ReadDir(dir)
	if len(names) != 1 {
		t.Fatalf("%d files while filled, want 1", len(names))
	}
	f, err := os.Open(filepath.Join(dir, names[0].Name()))
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	resident := make([]byte, size/os.Getpagesize())
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&resident[0])))
	unix.Munmap(m)
	if errno != 0 {
		t.Fatal("mincore:", errno)
	}
	for i, r := range resident {
		if r&1 == 0 {
			t.Fatalf("page %d of %d not in the page cache after the fill", i, len(resident))
		}
	}
	remove()
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Fatalf("%d files after remove, want 0", len(names))
	}
	if filled, remove, err := FillPageCache(dir, free<<4); err != nil || filled != 0 {
		t.Fatalf("leaving more than there is: filled %d, %v", filled, err)
	} else {
		remove()
	}
}

func TestConfigLimits(t *testing.T) {
	good := Config{Bootstrap: []string{"127.0.0.1:1"}, Topic: "t", Size: 10, Duration: time.Second, Acks: -1, Producers: 1}
	if err := good.check(true); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Config){
		"no duration":      func(c *Config) { c.Duration = 0 },
		"huge duration":    func(c *Config) { c.Duration = 2 * MaxDuration },
		"no topic":         func(c *Config) { c.Topic = "" },
		"big value":        func(c *Config) { c.Size = MaxSize + 1 },
		"no producers":     func(c *Config) { c.Producers = 0 },
		"bad acks":         func(c *Config) { c.Acks = 2 },
		"negative rate":    func(c *Config) { c.Rate = -1 },
		"negative warm-up": func(c *Config) { c.Warmup = -time.Second },
	} {
		c := good
		mod(&c)
		if c.check(true) == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for in, want := range map[string]Acks{"all": -1, "-1": -1, "1": 1, "leader": 1, "0": 0, "none": 0} {
		if got, err := ParseAcks(in); err != nil || got != want {
			t.Errorf("ParseAcks(%q) = %v %v, want %v", in, got, err, want)
		}
	}
	if _, err := ParseAcks("2"); err == nil {
		t.Error("ParseAcks(2) accepted")
	}
}

func TestRawWrite(t *testing.T) {
	mb, d, err := RawWrite(t.TempDir(), 4*RawChunk+5)
	if err != nil || mb <= 0 || d <= 0 {
		t.Fatalf("RawWrite = %v %v %v", mb, d, err)
	}
	if _, _, err := RawWrite(t.TempDir(), 10); err == nil {
		t.Fatal("RawWrite of less than a chunk accepted")
	}
}

func TestChart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.png")
	c := Chart{Title: "t", YLabel: "ratio", Categories: []string{"a", "b"},
		Series: []Series{{"x", []float64{1, 1}}, {"y", []float64{0.5, 0.7}}}, Marks: []Mark{{"target", 0.5}}}
	if err := c.Save(path, 6*vg.Inch, 3*vg.Inch); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("not a PNG: %v", err)
	}
	c.Series[1].Values = []float64{1}
	if err := c.Save(path, 6*vg.Inch, 3*vg.Inch); err == nil {
		t.Fatal("a series with too few values accepted")
	}
}
