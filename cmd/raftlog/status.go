package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/raftlog/raftlog/cluster/node"
)

type listFlag struct {
	vals []string
	set  bool
}

func (l *listFlag) String() string { return strings.Join(l.vals, ",") }
func (l *listFlag) Set(s string) error {
	if !l.set {
		l.vals, l.set = nil, true
	}
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			l.vals = append(l.vals, v)
		}
	}
	return nil
}

const clusterUsage = "usage: raftlog cluster status [--http ADDR,...] [--discover=false] [--timeout 3s]"

func runCluster(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		fmt.Fprintln(stderr, "raftlog cluster: a command is needed: status")
	case args[0] == "status":
		return runClusterStatus(args[1:], stdout, stderr)
	case isHelp(args[0]):
		fmt.Fprintln(stdout, clusterUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "raftlog cluster: unknown command %q\n", args[0])
	}
	fmt.Fprintln(stderr, clusterUsage)
	return 2
}

// statusTarget is one node queried (or known of and not reachable).
type statusTarget struct {
	addr   string
	nodeID int32 // -1 until known
	st     *node.Status
	err    error
	// skipped: a live member the answers name, not asked
	// (--discover=false): its health is not known.
	skipped bool
}

// runClusterStatus is `raftlog cluster status`: it asks every node given
// (and, with --discover, every live member the answers name) for
// /v1/status and prints the nodes, then the partitions. It exits 1 when a
// node does not answer or is not ready, or a partition has no leader.
func runClusterStatus(args []string, stdout, stderr io.Writer) int {
	c := newCommand("cluster status", "", `Ask every node given (and, with --discover, every live member the answers
name) for /v1/status and print the nodes, then the partitions. Exit status 1
when a node does not answer or is not ready, or a partition has no leader.`)
	addrs := &listFlag{vals: []string{"127.0.0.1:9392"}}
	c.Var(addrs, "http", "comma-separated HTTP addresses (--http-addr) of nodes to ask (repeatable)")
	discover := c.Bool("discover", true, "also ask the live members the nodes name, at their gossiped HTTP addresses")
	timeout := c.Duration("timeout", 3*time.Second, "timeout of each request")
	pos, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if code, ok := c.noArgs(pos, stderr); !ok {
		return code
	}
	if len(addrs.vals) == 0 {
		return c.fail(stderr, "--http names no address")
	}
	if *timeout <= 0 {
		return c.fail(stderr, "--timeout %v: want more than 0", *timeout)
	}
	hc := &http.Client{Timeout: *timeout}
	var targets []*statusTarget
	seenAddr := map[string]bool{}
	var pending []*statusTarget
	for _, a := range addrs.vals {
		if !seenAddr[a] {
			seenAddr[a] = true
			pending = append(pending, &statusTarget{addr: a, nodeID: -1})
		}
	}
	brokers := map[int32]node.BrokerStatus{}
	for len(pending) > 0 {
		queryAll(hc, pending)
		targets = append(targets, pending...)
		pending = nil
		for _, t := range targets {
			if t.st == nil {
				continue
			}
			t.nodeID = t.st.NodeID
			for _, b := range t.st.Brokers {
				brokers[b.NodeID] = b
			}
		}
		// A failed address that a member gossips is that member.
		for _, t := range targets {
			for _, b := range brokers {
				if t.nodeID < 0 && t.addr == b.HTTPAddr {
					t.nodeID = b.NodeID
				}
			}
		}
		if !*discover {
			break
		}
		for _, id := range sortedIDs(brokers) {
			b := brokers[id]
			if hasNode(targets, id) || !reachable(b.HTTPAddr) || seenAddr[b.HTTPAddr] {
				continue
			}
			seenAddr[b.HTTPAddr] = true
			pending = append(pending, &statusTarget{addr: b.HTTPAddr, nodeID: id})
		}
	}
	return printStatus(stdout, targets, brokers, *discover)
}

func queryAll(hc *http.Client, ts []*statusTarget) {
	var wg sync.WaitGroup
	for _, t := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.st, t.err = fetchStatus(hc, t.addr)
		}()
	}
	wg.Wait()
}

func fetchStatus(hc *http.Client, addr string) (*node.Status, error) {
	url := addr
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	url = strings.TrimRight(url, "/") + "/v1/status"
	ctx, cancel := context.WithTimeout(context.Background(), hc.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var st node.Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&st); err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return &st, nil
}

// reachable reports whether a gossiped HTTP address can be dialled as it
// is (not a wildcard bind address).
func reachable(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host != "" && (ip == nil || !ip.IsUnspecified())
}

func hasNode(ts []*statusTarget, id int32) bool {
	for _, t := range ts {
		if t.nodeID == id {
			return true
		}
	}
	return false
}

func sortedIDs[V any](m map[int32]V) []int32 {
	ids := make([]int32, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

type partKey struct {
	topic string
	p     int32
}

// partView is one partition as the answering nodes report it.
type partView struct {
	assigned []int32
	byNode   map[int32]node.ReplicaStatus
}

func printStatus(w io.Writer, targets []*statusTarget, brokers map[int32]node.BrokerStatus, discovered bool) int {
	healthy := true
	parts := map[partKey]*partView{}
	for _, t := range targets {
		if t.st == nil {
			continue
		}
		for _, r := range t.st.Replicas {
			k := partKey{r.Topic, r.Partition}
			pv := parts[k]
			if pv == nil {
				pv = &partView{byNode: map[int32]node.ReplicaStatus{}}
				parts[k] = pv
			}
			pv.assigned = r.Replicas
			pv.byNode[t.st.NodeID] = r
		}
	}
	// Every node answering, gossiped or assigned a replica has a row.
	rows := map[int32]*statusTarget{}
	var unknown []*statusTarget
	for _, t := range targets {
		if t.nodeID < 0 {
			unknown = append(unknown, t)
		} else if rows[t.nodeID] == nil || t.st != nil {
			rows[t.nodeID] = t
		}
	}
	for id, b := range brokers {
		if rows[id] == nil {
			if discovered {
				rows[id] = &statusTarget{addr: b.HTTPAddr, nodeID: id, err: fmt.Errorf("a live member whose HTTP address cannot be dialled")}
			} else {
				rows[id] = &statusTarget{addr: b.HTTPAddr, nodeID: id, skipped: true, err: fmt.Errorf("a live member, not asked (--discover=false)")}
			}
		}
	}
	for _, pv := range parts {
		for _, id := range pv.assigned {
			if rows[id] == nil {
				rows[id] = &statusTarget{nodeID: id, err: fmt.Errorf("assigned replicas but not a live member")}
			}
		}
	}

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tHTTP\tHEALTH\tCONTROLLER\tREPLICAS\tLEADING\tDETAIL")
	nodeRow := func(id string, t *statusTarget) {
		addr := t.addr
		if addr == "" {
			addr = "-"
		}
		if t.st == nil && t.skipped {
			fmt.Fprintf(tw, "%s\t%s\tnot-asked\t-\t-\t-\t%v\n", id, addr, t.err)
			return
		}
		if t.st == nil {
			healthy = false
			fmt.Fprintf(tw, "%s\t%s\tdown\t-\t-\t-\t%v\n", id, addr, t.err)
			return
		}
		st := t.st
		health := "ready"
		if !st.Ready {
			health, healthy = "not-ready", false
		}
		ctrl := "-"
		if st.ControllerID >= 0 {
			ctrl = strconv.Itoa(int(st.ControllerID))
		}
		leading := 0
		for _, r := range st.Replicas {
			if r.Leader == st.NodeID {
				leading++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", id, addr, health, ctrl, len(st.Replicas), leading, st.Reason)
	}
	for _, id := range sortedIDs(rows) {
		nodeRow(strconv.Itoa(int(id)), rows[id])
	}
	for _, t := range unknown {
		nodeRow("?", t)
	}
	tw.Flush()

	keys := make([]partKey, 0, len(parts))
	for k := range parts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].topic != keys[j].topic {
			return keys[i].topic < keys[j].topic
		}
		return keys[i].p < keys[j].p
	})
	fmt.Fprintln(w)
	if len(keys) == 0 {
		fmt.Fprintln(w, "no partitions reported")
		return b2i(!healthy)
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tLEADER\tTERM\tHIGH-WATERMARK\tEND-OFFSET\tCOMMIT-LAG\tREPLICA-LAG")
	for _, k := range keys {
		pv := parts[k]
		// The leader's own report when it answered, else the view of the
		// replica in the highest term.
		var best node.ReplicaStatus
		found := false
		for _, r := range pv.byNode {
			if !found || r.Term > best.Term {
				best, found = r, true
			}
		}
		leader := best.Leader
		if r, ok := pv.byNode[leader]; ok && leader >= 0 {
			best = r
		}
		ld, term, hw, end, lag := "-", "-", "-", "-", "-"
		if leader >= 0 {
			ld = strconv.Itoa(int(leader))
			term = strconv.FormatUint(best.Term, 10)
		} else {
			healthy = false
		}
		if _, ok := pv.byNode[leader]; ok && leader >= 0 {
			hw, end = strconv.FormatInt(best.HighWatermark, 10), strconv.FormatInt(best.EndOffset, 10)
			lag = strconv.FormatInt(max(best.EndOffset-best.HighWatermark, 0), 10)
		}
		// Replica lag: the leader's end offset minus each replica's.
		var reps []string
		for _, id := range pv.assigned {
			r, ok := pv.byNode[id]
			s := strconv.Itoa(int(id)) + ":"
			switch {
			case !ok:
				s += "?"
			case id == leader:
				s += "leader"
			case end != "-":
				s += strconv.FormatInt(max(best.EndOffset-r.EndOffset, 0), 10)
			default:
				s += "end=" + strconv.FormatInt(r.EndOffset, 10)
			}
			if ok && r.Gated {
				s += "(gated)"
			}
			reps = append(reps, s)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", k.topic, k.p, ld, term, hw, end, lag, strings.Join(reps, " "))
	}
	tw.Flush()
	return b2i(!healthy)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
