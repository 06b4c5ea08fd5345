package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// consumeIdle is how long a consume with --exit waits for more records
// once some partition has not reached its end, for every partition alike.
// A partition in the legacy offset layout (written before dense offsets)
// holds Raft's control batches at offsets no record is read at, so its
// last offsets may never be seen; a dense partition that stops short of
// its end is told the same way (the layout is not known to the client).
const consumeIdle = 2 * time.Second

// runConsume prints the records of a topic from --from until --count
// records or, with --exit, the end offsets it had when the command began.
func runConsume(args []string, stdout, stderr io.Writer) int {
	c := newCommand("consume", "", `Print the records of a topic, one a line: partition, offset, key and value,
separated by tabs. A key or value that is not printable UTF-8 text (or holds a
tab, or starts with a double quote) is printed quoted and escaped, as Go's
strconv.Quote does.`)
	cf := addClientFlags(c, 10*time.Second, "give up when the cluster has not answered within this long (the wait for records is not bounded by it)")
	topic := c.String("topic", "", "topic")
	from := c.String("from", "start", "where to start: start, end (only new records) or an offset (with --partition when the topic has several)")
	partition := c.Int("partition", -1, "read only this partition (-1: all)")
	count := c.Int("count", 0, "stop after this many records (0: no limit)")
	exit := c.Bool("exit", false, "stop at the end offsets the topic had when the command began")
	pos, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if code, ok := c.noArgs(pos, stderr); !ok {
		return code
	}
	if code, ok := cf.check(c, stderr); !ok {
		return code
	}
	if *topic == "" {
		return c.fail(stderr, "--topic is needed")
	}
	if *count < 0 {
		return c.fail(stderr, "--count %d: want 0 (no limit) or more", *count)
	}
	if *partition < -1 {
		return c.fail(stderr, "--partition %d: want -1 (all) or a partition number", *partition)
	}
	fromOffset := int64(-1)
	switch *from {
	case "start", "end":
	default:
		n, err := strconv.ParseInt(*from, 10, 64)
		if err != nil || n < 0 {
			return c.fail(stderr, "--from %q: want start, end or an offset (0 or more)", *from)
		}
		fromOffset = n
	}

	sctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fail := func(err error) int {
		if sctx.Err() != nil {
			return 130
		}
		fmt.Fprintf(stderr, "raftlog consume: %v\n", timeoutErr(err, *cf.timeout))
		return 1
	}
	// Where to start and stop in each partition, looked up within --timeout.
	ctx, cancel := context.WithTimeout(sctx, *cf.timeout)
	defer cancel()
	meta, err := cf.connect(ctx)
	if err != nil {
		return fail(err)
	}
	defer meta.Close()
	adm := kadm.NewClient(meta)
	t, err := describeTopic(ctx, adm, *topic)
	if err != nil {
		return fail(err)
	}
	var parts []int32
	if *partition >= 0 {
		if _, ok := t.Partitions[int32(*partition)]; !ok {
			return fail(fmt.Errorf("topic %s has no partition %d (it has %d)", *topic, *partition, len(t.Partitions)))
		}
		parts = []int32{int32(*partition)}
	} else {
		parts = t.Partitions.Numbers()
	}
	if fromOffset >= 0 && len(parts) > 1 {
		return c.fail(stderr, "--from %d: an offset is within one partition: give --partition (topic %s has %d)", fromOffset, *topic, len(parts))
	}
	starts, err := listOffsets(ctx, adm.ListStartOffsets, *topic)
	if err != nil {
		return fail(fmt.Errorf("start offsets of %s: %w", *topic, err))
	}
	ends, err := listOffsets(ctx, adm.ListEndOffsets, *topic)
	if err != nil {
		return fail(fmt.Errorf("end offsets of %s: %w", *topic, err))
	}
	offsets := map[int32]kgo.Offset{}
	left := map[int32]int64{} // partition → end offset still to reach (--exit)
	for _, p := range parts {
		s, _ := starts.Lookup(*topic, p)
		e, _ := ends.Lookup(*topic, p)
		begin := s.Offset
		switch {
		case *from == "end":
			begin = e.Offset
		case fromOffset >= 0:
			if fromOffset < s.Offset || fromOffset > e.Offset {
				return fail(fmt.Errorf("--from %d is outside partition %d of %s, which holds offsets %d to %d", fromOffset, p, *topic, s.Offset, e.Offset))
			}
			begin = fromOffset
		}
		offsets[p] = kgo.NewOffset().At(begin)
		if e.Offset > begin {
			left[p] = e.Offset
		}
	}
	cancel()
	if *exit && len(left) == 0 {
		return 0
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(cf.seeds()...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{*topic: offsets}))
	if err != nil {
		return fail(err)
	}
	defer cl.Close()
	seen := 0
	for *count == 0 || seen < *count {
		pctx, pcancel := sctx, context.CancelFunc(func() {})
		if *exit {
			pctx, pcancel = context.WithTimeout(sctx, consumeIdle)
		}
		fetches := cl.PollFetches(pctx)
		idle := pctx.Err() != nil
		pcancel()
		if sctx.Err() != nil {
			return 0 // interrupted: the usual way to stop following
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) {
			if ferr == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				ferr = err
			}
		})
		if ferr != nil {
			return fail(ferr)
		}
		var recs []*kgo.Record
		fetches.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
		sort.SliceStable(recs, func(i, j int) bool { return recs[i].Partition < recs[j].Partition })
		for _, r := range recs {
			fmt.Fprintf(stdout, "%d\t%d\t%s\t%s\n", r.Partition, r.Offset, printable(r.Key), printable(r.Value))
			seen++
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
			if *count > 0 && seen >= *count {
				return 0
			}
		}
		if *exit && len(left) == 0 {
			return 0
		}
		if *exit && len(recs) == 0 && idle {
			// Nothing for a while: the offsets left are a legacy
			// partition's control batches, unless the cluster is gone.
			ctx, cancel := context.WithTimeout(sctx, *cf.timeout)
			err := cl.Ping(ctx)
			cancel()
			if err != nil {
				return fail(fmt.Errorf("lost the cluster after %d records: %w", seen, err))
			}
			return 0
		}
	}
	return 0
}

// listOffsets asks list for the offsets of topic until every partition
// answers (a new topic's partitions may not have leaders yet) or ctx ends.
func listOffsets(ctx context.Context, list func(context.Context, ...string) (kadm.ListedOffsets, error), topic string) (kadm.ListedOffsets, error) {
	for {
		o, err := list(ctx, topic)
		if err == nil {
			err = o.Error()
		}
		var ke *kerr.Error
		if err == nil || !errors.As(err, &ke) || !ke.Retriable {
			return o, err
		}
		select {
		case <-ctx.Done():
			return o, err
		case <-time.After(100 * time.Millisecond): // a leader is being elected
		}
	}
}

// printable is b as it is when it is printable UTF-8 text, else quoted
// and escaped (so is text holding a tab, which separates the columns, or
// starting with a double quote, which would read as quoted).
func printable(b []byte) string {
	s := string(b)
	if !utf8.ValidString(s) || (len(s) > 0 && s[0] == '"') {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
