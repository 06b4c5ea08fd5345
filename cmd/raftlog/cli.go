package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The client commands speak the Kafka protocol to any node, through
// franz-go: topic create|list|describe|delete, produce, consume.

func clientFlags(name string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	bootstrap := fs.String("bootstrap", envOr("RAFTLOG_BOOTSTRAP", "127.0.0.1:9092"), "comma-separated Kafka addresses of any nodes (RAFTLOG_BOOTSTRAP)")
	return fs, bootstrap
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func newClient(bootstrap string, opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(bootstrap, ",")...)}, opts...)...)
}

func runTopic(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: raftlog topic create|list|describe|delete [flags] [name]")
		return 2
	}
	fs, bootstrap := clientFlags("topic "+args[0], stderr)
	partitions := fs.Int("partitions", 3, "partitions (create)")
	rf := fs.Int("replication-factor", -1, "replicas (create; -1: the cluster default)")
	var configs multiFlag
	fs.Var(&configs, "config", "key=value topic config (create; repeatable)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	cl, err := newClient(*bootstrap)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := fs.Arg(0)
	needName := func() bool {
		if name == "" {
			fmt.Fprintln(stderr, "a topic name is needed")
			return false
		}
		return true
	}
	switch args[0] {
	case "create":
		if !needName() {
			return 2
		}
		cfg := map[string]*string{}
		for _, kv := range configs {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				fmt.Fprintf(stderr, "--config %q is not key=value\n", kv)
				return 2
			}
			cfg[k] = &v
		}
		resp, err := adm.CreateTopic(ctx, int32(*partitions), int16(*rf), cfg, name)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			fmt.Fprintf(stderr, "create %s: %v\n", name, err)
			return 1
		}
		fmt.Fprintf(stdout, "created %s: %d partitions\n", name, *partitions)
	case "list":
		td, err := adm.ListTopics(ctx)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		for _, t := range td.Sorted() {
			fmt.Fprintf(stdout, "%s\t%d partitions\n", t.Topic, len(t.Partitions))
		}
	case "describe":
		if !needName() {
			return 2
		}
		td, err := adm.ListTopics(ctx, name)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		t, ok := td[name]
		if !ok || t.Err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, t.Err)
			return 1
		}
		ends, _ := adm.ListEndOffsets(ctx, name)
		fmt.Fprintf(stdout, "topic %s id %s\n", name, t.ID)
		for _, p := range t.Partitions.Sorted() {
			end := int64(-1)
			if o, ok := ends.Lookup(name, p.Partition); ok {
				end = o.Offset
			}
			fmt.Fprintf(stdout, "  partition %d leader %d epoch %d replicas %v isr %v end %d\n", p.Partition, p.Leader, p.LeaderEpoch, p.Replicas, p.ISR, end)
		}
	case "delete":
		if !needName() {
			return 2
		}
		resp, err := adm.DeleteTopics(ctx, name)
		if err == nil {
			if r, ok := resp[name]; ok {
				err = r.Err
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "delete %s: %v\n", name, err)
			return 1
		}
		fmt.Fprintf(stdout, "deleted %s\n", name)
	default:
		fmt.Fprintln(stderr, "usage: raftlog topic create|list|describe|delete [flags] [name]")
		return 2
	}
	return 0
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// runProduce writes one record per line of standard input (key and value
// split at --key-sep when given), acks=all.
func runProduce(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs, bootstrap := clientFlags("produce", stderr)
	topic := fs.String("topic", "", "topic")
	sep := fs.String("key-sep", "", "split each line into key and value at this separator")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *topic == "" {
		fmt.Fprintln(stderr, "--topic is needed")
		return 2
	}
	cl, err := newClient(*bootstrap, kgo.DefaultProduceTopic(*topic))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer cl.Close()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		r := &kgo.Record{Value: []byte(line)}
		if *sep != "" {
			if k, v, ok := strings.Cut(line, *sep); ok {
				r.Key, r.Value = []byte(k), []byte(v)
			}
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			fmt.Fprintf(stderr, "produce: %v\n", err)
			return 1
		}
		n++
	}
	fmt.Fprintf(stderr, "produced %d records\n", n)
	return 0
}

// runConsume prints the records of a topic from --from (start, end) until
// --count records or, with --exit, the end.
func runConsume(args []string, stdout, stderr io.Writer) int {
	fs, bootstrap := clientFlags("consume", stderr)
	topic := fs.String("topic", "", "topic")
	from := fs.String("from", "start", "start or end")
	count := fs.Int("count", 0, "stop after this many records (0: no limit)")
	exit := fs.Bool("exit", false, "stop at the end of the topic")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *topic == "" {
		fmt.Fprintln(stderr, "--topic is needed")
		return 2
	}
	off := kgo.NewOffset().AtStart()
	if *from == "end" {
		off = kgo.NewOffset().AtEnd()
	}
	cl, err := newClient(*bootstrap, kgo.ConsumeTopics(*topic), kgo.ConsumeResetOffset(off))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer cl.Close()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	seen := 0
	for *count == 0 || seen < *count {
		pctx := ctx
		var pcancel context.CancelFunc = func() {}
		if *exit {
			// The end: a poll that brings nothing for two seconds.
			pctx, pcancel = context.WithTimeout(ctx, 2*time.Second)
		}
		fetches := cl.PollFetches(pctx)
		pcancel()
		if errors.Is(ctx.Err(), context.Canceled) {
			return 0
		}
		var recs []*kgo.Record
		fetches.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
		if len(recs) == 0 && *exit {
			break
		}
		sort.SliceStable(recs, func(i, j int) bool { return recs[i].Partition < recs[j].Partition })
		for _, r := range recs {
			fmt.Fprintf(stdout, "%d\t%d\t%s\t%s\n", r.Partition, r.Offset, r.Key, r.Value)
			seen++
			if *count > 0 && seen >= *count {
				break
			}
		}
	}
	return 0
}
