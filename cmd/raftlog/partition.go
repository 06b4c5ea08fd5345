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
	if len(args) == 0 || args[0] != "reassign" {
		fmt.Fprintln(stderr, partitionUsage)
		return 2
	}
	return runReassign(args[1:], stdout, stderr)
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
	fs, bootstrap := clientFlags("partition reassign", stderr)
	topic := fs.String("topic", "", "topic")
	partition := fs.Int("partition", -1, "partition")
	replicasFlag := fs.String("replicas", "", "comma-separated node ids of the new replicas, the preferred leader first")
	cancelMove := fs.Bool("cancel", false, "cancel the reassignment in progress (the partition moves back)")
	httpAddrs := &listFlag{}
	fs.Var(httpAddrs, "http", "HTTP addresses (--http-addr) of nodes, to show each new replica's lag (comma-separated, repeatable; the other members are found from them)")
	wait := fs.Bool("wait", true, "follow the move until it is done")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up waiting after this long")
	interval := fs.Duration("interval", time.Second, "time between progress checks")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *topic == "" || *partition < 0 || fs.NArg() > 0 || (*cancelMove && *replicasFlag != "") {
		fmt.Fprintln(stderr, partitionUsage)
		return 2
	}
	var target []int32
	if *replicasFlag != "" {
		var err error
		if target, err = parseIDs(*replicasFlag); err != nil || len(target) == 0 {
			fmt.Fprintf(stderr, "--replicas %q: %v\n", *replicasFlag, err)
			return 2
		}
	}
	cl, err := newClient(*bootstrap)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	p := int32(*partition)
	name := fmt.Sprintf("%s-%d", *topic, p)

	if target != nil || *cancelMove {
		var req kadm.AlterPartitionAssignmentsReq
		req.Assign(*topic, p, target) // nil target: cancel
		resp, err := adm.AlterPartitionAssignments(ctx, req)
		if err == nil {
			if r, ok := resp[*topic][p]; ok && r.Err != nil {
				err = fmt.Errorf("%w: %s", r.Err, r.ErrMessage)
			} else if !ok {
				err = errors.New("no answer for the partition")
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "reassign %s: %v\n", name, err)
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
