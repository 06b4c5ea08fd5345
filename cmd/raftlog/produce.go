package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runProduce writes one record per line of standard input (key and value
// split at --key-sep when given), acks=all.
func runProduce(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("produce", "", "Write one record per line of standard input to an existing topic, acks=all, and say how many were written.")
	cf := addClientFlags(c, 10*time.Second, "give up when the cluster has not answered, or a record has not been acknowledged, within this long")
	topic := c.String("topic", "", "topic (it must exist: raftlog topic create)")
	sep := c.String("key-sep", "", "split each line into key and value at this separator")
	partition := c.Int("partition", -1, "write every record to this partition (-1: spread by key, or evenly)")
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
	if *partition < -1 {
		return c.fail(stderr, "--partition %d: want -1 (any) or a partition number", *partition)
	}
	opts := []kgo.Opt{kgo.DefaultProduceTopic(*topic), kgo.RecordDeliveryTimeout(*cf.timeout)}
	if *partition >= 0 {
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	sctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(sctx, *cf.timeout)
	cl, err := cf.connect(ctx, opts...)
	if err == nil {
		var t kadm.TopicDetail
		t, err = describeTopic(ctx, kadm.NewClient(cl), *topic)
		if err == nil && *partition >= 0 {
			if _, ok := t.Partitions[int32(*partition)]; !ok {
				err = fmt.Errorf("topic %s has no partition %d (it has %d)", *topic, *partition, len(t.Partitions))
			}
		}
		if err != nil {
			cl.Close()
		}
	}
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "raftlog produce: %v\n", timeoutErr(err, *cf.timeout))
		return 1
	}
	defer cl.Close()
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		r := &kgo.Record{Value: []byte(line), Partition: int32(*partition)}
		if *sep != "" {
			if k, v, ok := strings.Cut(line, *sep); ok {
				r.Key, r.Value = []byte(k), []byte(v)
			}
		}
		if err := cl.ProduceSync(sctx, r).FirstErr(); err != nil {
			if sctx.Err() != nil {
				fmt.Fprintf(stderr, "raftlog produce: interrupted; %d records written\n", n)
				return 1
			}
			fmt.Fprintf(stderr, "raftlog produce: line %d: %v; %d records written\n", n+1, timeoutErr(err, *cf.timeout), n)
			return 1
		}
		n++
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(stderr, "raftlog produce: reading standard input: %v; %d records written\n", err, n)
		return 1
	}
	fmt.Fprintf(stderr, "produced %d records to %s\n", n, *topic)
	return 0
}
