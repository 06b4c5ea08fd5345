package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/raftlog/raftlog/cluster/node"
	"github.com/twmb/franz-go/pkg/kadm"
)

// `raftlog partition reassign` moves a partition's replicas through the
// Kafka protocol (AlterPartitionReassignments, then
// ListPartitionReassignments and Metadata to follow the move) and, given
// the nodes' HTTP addresses, shows how far each new replica is behind its
// leader (from /v1/status).

const partitionUsage = `usage: raftlog partition reassign --topic T --partition P [--replicas 1,2,4 | --cancel]
       [--bootstrap ADDRS] [--http ADDRS] [--wait=true] [--timeout 30m]`

func runPartition(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		fmt.Fprintln(stderr, "raftlog partition: a command is needed: reassign")
	case args[0] == "reassign":
		return runReassign(args[1:], stdout, stderr)
	case args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help":
		fmt.Fprintln(stdout, partitionUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "raftlog partition: unknown command %q\n", args[0])
	}
	fmt.Fprintln(stderr, partitionUsage)
	return 2
}

func parseIDs(s string) ([]int32, error) {
	var out []int32
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseInt(f, 10, 32)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%q is not a node id", f)
		}
		out = append(out, int32(v))
	}
	return out, nil
}

// runReassign starts (--replicas), cancels (--cancel) or only follows
// (neither) the reassignment of one partition, and with --wait prints its
// progress until it is done.
func runReassign(args []string, stdout, stderr io.Writer) int {
	c := newCommand("partition reassign", "", `Move a partition's replicas (--replicas), cancel a move (--cancel) or, with
neither, follow the move in progress; with --wait, print its progress until it
is done.`)
	cf := addClientFlags(c, 30*time.Minute, "give up after this long (reaching the cluster: after at most 10s)")
	topic := c.String("topic", "", "topic")
	partition := c.Int("partition", -1, "partition")
	replicasFlag := c.String("replicas", "", "comma-separated node ids of the new replicas, the preferred leader first")
	cancelMove := c.Bool("cancel", false, "cancel the reassignment in progress (the partition moves back)")
	httpAddrs := &listFlag{}
	c.Var(httpAddrs, "http", "HTTP addresses (--http-addr) of nodes, to show each new replica's lag (comma-separated, repeatable; the other members are found from them)")
	wait := c.Bool("wait", true, "follow the move until it is done")
	interval := c.Duration("interval", time.Second, "time between progress checks")
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
	switch {
	case *topic == "":
		return c.fail(stderr, "--topic is needed")
	case *partition < 0:
		return c.fail(stderr, "--partition is needed (0 or more)")
	case *cancelMove && *replicasFlag != "":
		return c.fail(stderr, "--replicas and --cancel exclude each other")
	case *interval <= 0:
		return c.fail(stderr, "--interval %v: want more than 0", *interval)
	}
	var target []int32
	if *replicasFlag != "" {
		var err error
		if target, err = parseIDs(*replicasFlag); err != nil {
			return c.fail(stderr, "--replicas %q: %v", *replicasFlag, err)
		}
		if len(target) == 0 {
			return c.fail(stderr, "--replicas %q names no node", *replicasFlag)
		}
	}
	timeout := cf.timeout
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cctx, ccancel := context.WithTimeout(ctx, min(*timeout, 10*time.Second))
	cl, err := cf.connect(cctx)
	var adm *kadm.Client
	if err == nil {
		defer cl.Close()
		adm = kadm.NewClient(cl)
		var t kadm.TopicDetail
		if t, err = describeTopic(cctx, adm, *topic); err == nil {
			if _, ok := t.Partitions[int32(*partition)]; !ok {
				err = fmt.Errorf("topic %s has no partition %d (it has %d)", *topic, *partition, len(t.Partitions))
			}
		}
	}
	ccancel()
	if err != nil {
		fmt.Fprintf(stderr, "raftlog partition reassign: %v\n", timeoutErr(err, min(*timeout, 10*time.Second)))
		return 1
	}
	p := int32(*partition)
	name := fmt.Sprintf("%s-%d", *topic, p)

	if target != nil || *cancelMove {
		var req kadm.AlterPartitionAssignmentsReq
		req.Assign(*topic, p, target) // nil target: cancel
		resp, err := adm.AlterPartitionAssignments(ctx, req)
		if err == nil {
			if r, ok := resp[*topic][p]; ok && r.Err != nil {
				err = kafkaErr(r.Err, r.ErrMessage)
			} else if !ok {
				err = errors.New("no answer for the partition")
			}
		} else {
			err = kafkaErr(timeoutErr(err, *timeout), "")
		}
		if err != nil {
			fmt.Fprintf(stderr, "raftlog partition reassign %s: %v\n", name, err)
			return 1
		}
		if *cancelMove {
			fmt.Fprintf(stdout, "%s: reassignment cancelled, moving back\n", name)
		} else {
			fmt.Fprintf(stdout, "%s: reassignment to %s started\n", name, joinIDs(target))
		}
	}
	if !*wait {
		return 0
	}
	hc := &http.Client{Timeout: 3 * time.Second}
	last := ""
	for {
		line, done, err := reassignProgress(ctx, adm, hc, httpAddrs.vals, *topic, p, target)
		if err != nil && ctx.Err() == nil {
			line = "error: " + err.Error() // transient (a node restarting): keep asking
		}
		if line != last {
			fmt.Fprintf(stdout, "%s: %s\n", name, line)
			last = line
		}
		if done {
			return 0
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(stderr, "%s: not done after %v\n", name, *timeout)
			return 1
		case <-time.After(*interval): // polling the cluster's progress
		}
	}
}

// reassignProgress describes where the move of topic/p stands; done once
// no move is in progress (with the replicas equal to target when one is
// given).
func reassignProgress(ctx context.Context, adm *kadm.Client, hc *http.Client, httpAddrs []string, topic string, p int32, target []int32) (string, bool, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := adm.ListPartitionReassignments(rctx, kadm.TopicsSet{topic: {p: {}}})
	if err != nil {
		return "", false, err
	}
	if r, moving := list[topic][p]; moving {
		var lag map[int32]string
		if len(httpAddrs) > 0 {
			lag = replicaLag(hc, httpAddrs, topic, p)
		}
		var adding []string
		for _, id := range r.AddingReplicas {
			s := strconv.Itoa(int(id))
			switch l, ok := lag[id]; {
			case lag == nil:
			case !ok:
				s += " (not started)"
			default:
				s += " (" + l + ")"
			}
			adding = append(adding, s)
		}
		line := fmt.Sprintf("moving: replicas %s; adding %s; removing %s once the new ones are caught up",
			joinIDs(r.Replicas), orNone(adding), orNone(idStrings(r.RemovingReplicas)))
		return line, false, nil
	}
	td, err := adm.ListTopics(rctx, topic)
	if err != nil {
		return "", false, err
	}
	t, ok := td[topic]
	if !ok || t.Err != nil {
		return "", false, fmt.Errorf("topic %s: %v", topic, t.Err)
	}
	pd, ok := t.Partitions[p]
	if !ok {
		return "", false, fmt.Errorf("no partition %d", p)
	}
	if target != nil && !slices.Equal(pd.Replicas, target) {
		// The node answering may not have applied the end of the move yet.
		return fmt.Sprintf("finishing: replicas %s", joinIDs(pd.Replicas)), false, nil
	}
	return fmt.Sprintf("done: replicas %s, leader %d", joinIDs(pd.Replicas), pd.Leader), true, nil
}

// replicaLag asks the nodes' /v1/status (and that of the members they
// name) for their replicas of topic/p: per node, "caught up" or
// "lag N" (the leader's high watermark minus that replica's log end).
func replicaLag(hc *http.Client, addrs []string, topic string, p int32) map[int32]string {
	var pending []*statusTarget
	seen := map[string]bool{}
	for _, a := range addrs {
		if !seen[a] {
			seen[a] = true
			pending = append(pending, &statusTarget{addr: a, nodeID: -1})
		}
	}
	byNode := map[int32]node.ReplicaStatus{}
	for len(pending) > 0 {
		queryAll(hc, pending)
		var next []*statusTarget
		for _, t := range pending {
			if t.st == nil {
				continue
			}
			for _, r := range t.st.Replicas {
				if r.Topic == topic && r.Partition == p {
					byNode[t.st.NodeID] = r
				}
			}
			for _, b := range t.st.Brokers {
				if !seen[b.HTTPAddr] && reachable(b.HTTPAddr) {
					seen[b.HTTPAddr] = true
					next = append(next, &statusTarget{addr: b.HTTPAddr, nodeID: b.NodeID})
				}
			}
		}
		pending = next
	}
	var hw int64 = -1
	for id, r := range byNode {
		if r.Leader == id {
			hw = r.HighWatermark
		}
	}
	out := map[int32]string{}
	for id, r := range byNode {
		switch {
		case hw < 0:
			out[id] = "end " + strconv.FormatInt(r.EndOffset, 10)
		case r.EndOffset >= hw:
			out[id] = "caught up"
		default:
			out[id] = "catching up, lag " + strconv.FormatInt(hw-r.EndOffset, 10)
		}
	}
	return out
}

func idStrings(ids []int32) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strconv.Itoa(int(id))
	}
	return out
}

func joinIDs(ids []int32) string { return strings.Join(idStrings(ids), ",") }

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
