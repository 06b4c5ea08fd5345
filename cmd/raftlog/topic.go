package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// `raftlog topic create|list|describe|delete` speak the Kafka protocol to
// any node, through franz-go.

const topicUsage = `usage: raftlog topic create|list|describe|delete [flags] [NAME]
Run 'raftlog topic create -h' (or list, describe, delete) for the flags of each.`

func runTopic(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "raftlog topic: a command is needed: create, list, describe or delete")
		fmt.Fprintln(stderr, topicUsage)
		return 2
	}
	switch args[0] {
	case "create":
		return runTopicCreate(args[1:], stdout, stderr)
	case "list", "describe", "delete":
		return runTopicOther(args[0], args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, topicUsage)
		return 0
	}
	fmt.Fprintf(stderr, "raftlog topic: unknown command %q\n%s\n", args[0], topicUsage)
	return 2
}

const topicTimeoutUsage = "give up when the cluster has not answered within this long"

func runTopicCreate(args []string, stdout, stderr io.Writer) int {
	c := newCommand("topic create", "NAME", "Create the topic NAME and print its partitions and replication factor as the cluster created them.")
	cf := addClientFlags(c, 30*time.Second, topicTimeoutUsage)
	partitions := c.Int("partitions", 3, "partitions (at least 1)")
	rf := c.Int("replication-factor", -1, "replicas of each partition (-1: the cluster's default)")
	var configs multiFlag
	c.Var(&configs, "config", "key=value topic config (repeatable)")
	pos, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if code, ok := cf.check(c, stderr); !ok {
		return code
	}
	switch {
	case len(pos) == 0:
		return c.fail(stderr, "a topic name is needed")
	case len(pos) > 1:
		return c.fail(stderr, "one topic at a time: unexpected %s", strings.Join(pos[1:], " "))
	case *partitions < 1 || *partitions > math.MaxInt32:
		return c.fail(stderr, "--partitions %d: want at least 1", *partitions)
	case *rf == 0 || *rf < -1 || *rf > math.MaxInt16:
		return c.fail(stderr, "--replication-factor %d: want -1 (the cluster's default) or at least 1", *rf)
	}
	name := pos[0]
	cfg := map[string]*string{}
	for _, kv := range configs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return c.fail(stderr, "--config %q is not key=value", kv)
		}
		cfg[k] = &v
	}
	ctx, cancel := context.WithTimeout(context.Background(), *cf.timeout)
	defer cancel()
	cl, err := cf.connect(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "raftlog topic create: %v\n", err)
		return 1
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, int32(*partitions), int16(*rf), cfg, name)
	if err == nil {
		err = kafkaErr(resp.Err, resp.ErrMessage)
	} else {
		err = kafkaErr(err, "")
	}
	if err != nil {
		fmt.Fprintf(stderr, "raftlog topic create %s: %v\n", name, timeoutErr(err, *cf.timeout))
		return 1
	}
	n, r := resp.NumPartitions, resp.ReplicationFactor
	if n <= 0 { // an older broker does not say
		n = int32(*partitions)
	}
	if r > 0 {
		fmt.Fprintf(stdout, "created topic %s: %d partition%s, replication factor %d\n", name, n, plural(int(n)), r)
	} else {
		fmt.Fprintf(stdout, "created topic %s: %d partition%s\n", name, n, plural(int(n)))
	}
	return 0
}

func runTopicOther(sub string, args []string, stdout, stderr io.Writer) int {
	var c *command
	switch sub {
	case "list":
		c = newCommand("topic list", "", "List the topics and their partition counts.")
	case "describe":
		c = newCommand("topic describe", "NAME", "Print the topic's id and, for each partition, its leader, replicas, in-sync replicas and end offset.")
	case "delete":
		c = newCommand("topic delete", "NAME", "Delete the topic NAME.")
	}
	cf := addClientFlags(c, 30*time.Second, topicTimeoutUsage)
	pos, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if code, ok := cf.check(c, stderr); !ok {
		return code
	}
	var name string
	if sub == "list" {
		if code, ok := c.noArgs(pos, stderr); !ok {
			return code
		}
	} else {
		switch {
		case len(pos) == 0:
			return c.fail(stderr, "a topic name is needed")
		case len(pos) > 1:
			return c.fail(stderr, "one topic at a time: unexpected %s", strings.Join(pos[1:], " "))
		}
		name = pos[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), *cf.timeout)
	defer cancel()
	cl, err := cf.connect(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "raftlog %s: %v\n", c.name, err)
		return 1
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	fail := func(err error) int {
		if name != "" {
			fmt.Fprintf(stderr, "raftlog %s %s: %v\n", c.name, name, timeoutErr(err, *cf.timeout))
		} else {
			fmt.Fprintf(stderr, "raftlog %s: %v\n", c.name, timeoutErr(err, *cf.timeout))
		}
		return 1
	}
	switch sub {
	case "list":
		td, err := adm.ListTopics(ctx)
		if err != nil {
			return fail(err)
		}
		for _, t := range td.Sorted() {
			fmt.Fprintf(stdout, "%s\t%d partitions\n", t.Topic, len(t.Partitions))
		}
	case "describe":
		t, err := describeTopic(ctx, adm, name)
		if err != nil {
			return fail(err)
		}
		ends, err := adm.ListEndOffsets(ctx, name)
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "topic %s id %s\n", name, t.ID)
		for _, p := range t.Partitions.Sorted() {
			end := "unknown"
			if o, ok := ends.Lookup(name, p.Partition); ok && o.Err == nil {
				end = fmt.Sprint(o.Offset)
			}
			fmt.Fprintf(stdout, "  partition %d leader %d epoch %d replicas %v isr %v end %s\n", p.Partition, p.Leader, p.LeaderEpoch, p.Replicas, p.ISR, end)
		}
	case "delete":
		if _, err := describeTopic(ctx, adm, name); err != nil {
			return fail(err)
		}
		resp, err := adm.DeleteTopics(ctx, name)
		if err == nil {
			if r, ok := resp[name]; ok {
				err = r.Err
			}
		}
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "deleted topic %s\n", name)
	}
	return 0
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
