package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// pnode is one `raftlog serve` process.
type pnode struct {
	id                            int
	dir, bootFile, logPath        string
	kafka, raft, gossip, httpAddr string
	cmd                           *exec.Cmd
	done                          chan struct{}
	boots                         int
	dock                          *dockerNet // nil: a local process
}

type pcluster struct {
	bin   string
	nodes []*pnode
	join  string
	net   *netns     // nil: every node on loopback
	dock  *dockerNet // non-nil: every node a container (net is its cutter)
	// spare is the node the member nemesis adds and removes (nil: none).
	spare *pnode
	moved map[int32][]int32 // partitions moved onto the spare: their replicas before
	out   string            // the run's results folder
}

func freePort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startCluster starts n nodes: on loopback ports, or each in its own
// network namespace of net at fixed ports of its own address.
func startCluster(bin, out string, n, partitions int, net *netns, dock *dockerNet, spare bool) (*pcluster, error) {
	if dock != nil {
		net = dock.net
	}
	c := &pcluster{bin: bin, net: net, dock: dock, moved: map[int32][]int32{}, out: out}
	var gossip []string
	total := n
	if spare {
		total++
	}
	for i := 0; i < total; i++ {
		nd := &pnode{id: i + 1, dir: filepath.Join(out, fmt.Sprintf("n%d", i+1)), dock: dock}
		if net != nil {
			a := net.addr(i + 1)
			nd.kafka, nd.raft, nd.gossip, nd.httpAddr = a+":9092", a+":9192", a+":9292", a+":9392"
		} else {
			nd.kafka, nd.raft, nd.gossip, nd.httpAddr = freePort(), freePort(), freePort(), freePort()
		}
		nd.bootFile = filepath.Join(out, fmt.Sprintf("n%d.boot_id", i+1))
		nd.logPath = filepath.Join(out, fmt.Sprintf("n%d.log", i+1))
		if err := os.WriteFile(nd.bootFile, []byte("boot-1\n"), 0o644); err != nil {
			return nil, err
		}
		if i == n {
			c.spare = nd // joins through the others, not in their join list
			break
		}
		gossip = append(gossip, nd.gossip)
		c.nodes = append(c.nodes, nd)
	}
	c.join = strings.Join(gossip, ",")
	for _, nd := range c.nodes {
		if err := c.start(nd, partitions); err != nil {
			c.stopAll()
			return nil, err
		}
	}
	return c, nil
}

func (c *pcluster) start(nd *pnode, partitions int) error {
	lf, err := os.OpenFile(nd.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := []string{"serve", "--node-id", strconv.Itoa(nd.id), "--data-dir", nd.dir,
		"--kafka-addr", nd.kafka, "--raft-addr", nd.raft, "--gossip-addr", nd.gossip, "--http-addr", nd.httpAddr,
		"--join", c.join, "--boot-id-file", nd.bootFile, "--expect-nodes", strconv.Itoa(len(c.nodes)),
		"--controller-voters", strconv.Itoa(min(3, len(c.nodes))), "--default-partitions", strconv.Itoa(partitions),
		// Room for every replica of the test topics on each node, and the
		// spare's moves, however many partitions the run asks for.
		"--max-partitions-per-node", strconv.Itoa(max(1000, 2*partitions+16)),
		"--log-json", "--log-level", "info", "--pprof"}
	cmd := exec.Command(c.bin, args...)
	switch {
	case c.dock != nil:
		if cmd, err = c.dock.command(nd, args); err != nil {
			lf.Close()
			return err
		}
	case c.net != nil:
		cmd = c.net.command(nd.id, c.bin, args...)
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return err
	}
	nd.cmd = cmd
	nd.done = make(chan struct{})
	go func() { cmd.Wait(); lf.Close(); close(nd.done) }()
	return nil
}

func (nd *pnode) running() bool {
	if nd.done == nil {
		return false
	}
	select {
	case <-nd.done:
		return false
	default:
		return true
	}
}

func (nd *pnode) signal(s syscall.Signal) {
	if !nd.running() {
		return
	}
	if nd.dock != nil {
		nd.dock.signal(nd.id, strconv.Itoa(int(s)))
		return
	}
	nd.cmd.Process.Signal(s)
}

func (nd *pnode) kill() {
	if nd.running() {
		nd.signal(syscall.SIGCONT)
		nd.signal(syscall.SIGKILL)
		<-nd.done
	}
}

func (c *pcluster) stopAll() {
	all := c.nodes
	if c.spare != nil {
		all = append(append([]*pnode(nil), c.nodes...), c.spare)
	}
	for _, nd := range all {
		if nd.running() {
			nd.signal(syscall.SIGCONT)
			nd.signal(syscall.SIGTERM)
		}
	}
	for _, nd := range all {
		if nd.running() {
			select {
			case <-nd.done:
			case <-time.After(20 * time.Second):
				nd.kill()
			}
		}
	}
}

func (c *pcluster) bootstrap() []string {
	var out []string
	for _, nd := range c.nodes {
		out = append(out, nd.kafka)
	}
	return out
}

// waitReady waits until every node answers /readyz with 200.
func (c *pcluster) waitReady(ctx context.Context) error {
	for _, nd := range c.nodes {
		for {
			resp, err := http.Get("http://" + nd.httpAddr + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("node %d not ready", nd.id)
			case <-time.After(100 * time.Millisecond): // polling readiness until the deadline
			}
		}
	}
	return nil
}

func (c *pcluster) createTopic(name string, partitions int32, configs map[string]*string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.bootstrap()...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		_, err := adm.CreateTopic(ctx, partitions, int16(min(3, len(c.nodes))), configs, name)
		if err == nil || errors.Is(err, kerr.TopicAlreadyExists) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create topic: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	// Every partition takes a write before the run starts.
	pc, err := kgo.NewClient(kgo.SeedBrokers(c.bootstrap()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer pc.Close()
	for p := int32(0); p < partitions; p++ {
		for {
			if err := pc.ProduceSync(ctx, &kgo.Record{Topic: name, Partition: p, Value: []byte("warmup")}).FirstErr(); err == nil {
				break
			} else if ctx.Err() != nil {
				return fmt.Errorf("partition %d takes no write: %w", p, err)
			}
		}
	}
	return nil
}

// leaderOf returns the node leading a random partition of topic.
func (c *pcluster) leaderOf(rng *rand.Rand) *pnode {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.bootstrap()...))
	if err != nil {
		return nil
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return nil
	}
	ps := td[topic].Partitions.Sorted()
	if len(ps) == 0 {
		return nil
	}
	ld := ps[rng.IntN(len(ps))].Leader
	for _, nd := range c.nodes {
		if int32(nd.id) == ld {
			return nd
		}
	}
	return nil
}

// partitionKinds are the nemeses that cut the network.
var partitionKinds = map[string]bool{"partition": true, "partition-leader": true}

// split picks a random way to cut the cluster: one node off the rest, a
// minority off a majority, or (5 nodes) a bridge: two halves that do not
// see each other and one node that sees both.
func (c *pcluster) split(rng *rand.Rand) ([][]int, string) {
	ids := rng.Perm(len(c.nodes))
	for i := range ids {
		ids[i]++
	}
	n := len(ids)
	switch k := rng.IntN(3); {
	case k == 0 || n < 5:
		return [][]int{ids[:1], ids[1:]}, fmt.Sprintf("node %d isolated", ids[0])
	case k == 1:
		m := (n - 1) / 2
		return [][]int{ids[:m], ids[m:]}, fmt.Sprintf("minority %v | majority %v", ids[:m], ids[m:])
	default:
		m := n / 2
		return [][]int{ids[:m], ids[m+1:]}, fmt.Sprintf("bridge: %v | %v, node %d sees both", ids[:m], ids[m+1:], ids[m])
	}
}

// powerLoss does to a killed node what a power loss can: drop what it had
// not fsynced, and give it a new boot id.
func (c *pcluster) powerLoss(nd *pnode, rng *rand.Rand) (int64, error) {
	cut, err := dropUnsynced(nd.dir, rng)
	if err != nil {
		return cut, err
	}
	nd.boots++
	return cut, os.WriteFile(nd.bootFile, []byte(fmt.Sprintf("boot-%d\n", nd.boots+1)), 0o644)
}

// inject starts a fault and returns the node it hit.
func (c *pcluster) inject(kind string, rng *rand.Rand) (int, string) {
	nd := c.nodes[rng.IntN(len(c.nodes))]
	switch kind {
	case "member":
		what, err := c.addSpare(rng)
		if err != nil {
			return c.spare.id, "membership: " + err.Error()
		}
		return c.spare.id, "membership: " + what
	case "power-all":
		for _, o := range c.nodes {
			o.kill()
		}
		var cuts []string
		for _, o := range c.nodes {
			cut, err := c.powerLoss(o, rng)
			if err != nil {
				return 0, "power loss of every node: " + err.Error()
			}
			cuts = append(cuts, strconv.FormatInt(cut, 10))
		}
		return 0, "power loss of every node at once: unsynced bytes dropped per node " + strings.Join(cuts, ", ")
	case "partition":
		sides, what := c.split(rng)
		if err := c.net.partition(sides...); err != nil {
			return 0, "partition: " + err.Error()
		}
		return sides[0][0], "partition: " + what
	case "partition-leader":
		if ld := c.leaderOf(rng); ld != nil {
			nd = ld
		}
		var rest []int
		for _, o := range c.nodes {
			if o != nd {
				rest = append(rest, o.id)
			}
		}
		if err := c.net.partition([]int{nd.id}, rest); err != nil {
			return 0, "partition: " + err.Error()
		}
		return nd.id, fmt.Sprintf("partition: leader %d isolated", nd.id)
	case "kill":
		nd.kill()
		return nd.id, "kill -9"
	case "leader":
		if ld := c.leaderOf(rng); ld != nil {
			nd = ld
		}
		nd.kill()
		return nd.id, "kill -9 of a partition leader"
	case "pause":
		nd.signal(syscall.SIGSTOP)
		return nd.id, "SIGSTOP"
	case "power":
		nd.kill()
		cut, err := c.powerLoss(nd, rng)
		if err != nil {
			return nd.id, "power loss: " + err.Error()
		}
		return nd.id, fmt.Sprintf("power loss: %d bytes of unsynced log dropped", cut)
	}
	return 0, "unknown nemesis " + kind
}

// heal ends a fault: restart what was killed, continue what was paused.
func (c *pcluster) heal(kind string, id int) {
	if partitionKinds[kind] {
		c.net.heal()
		return
	}
	if kind == "member" {
		c.removeSpare()
		return
	}
	if kind == "power-all" {
		for _, nd := range c.nodes {
			if !nd.running() {
				c.start(nd, 0)
			}
		}
		return
	}
	if id == 0 {
		return
	}
	nd := c.nodes[id-1]
	switch kind {
	case "pause":
		nd.signal(syscall.SIGCONT)
	default:
		if !nd.running() {
			c.start(nd, 0)
		}
	}
}

// dropUnsynced does to a killed node's data what a power loss can: in
// every partition log, the bytes past the last fsynced point (the recovery
// point of partition.checkpoint, whose format docs/storage.md gives) are
// cut at a random batch boundary after it. It returns the bytes dropped.
func dropUnsynced(dataDir string, rng *rand.Rand) (int64, error) {
	logs, _ := filepath.Glob(filepath.Join(dataDir, "*", "log"))
	var total int64
	for _, dir := range logs {
		b, err := os.ReadFile(filepath.Join(dir, "partition.checkpoint"))
		if err != nil || len(b) < 24 || string(b[:4]) != "RLCP" {
			continue
		}
		rp := int64(binary.BigEndian.Uint64(b[8:]))
		segs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		sort.Strings(segs)
		for _, seg := range segs {
			base, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(seg), ".log"), 10, 64)
			if err != nil {
				continue
			}
			data, err := os.ReadFile(seg)
			if err != nil {
				continue
			}
			// Batch boundaries at or past the durable point.
			var cuts []int64
			for pos := int64(0); pos+12 <= int64(len(data)); {
				off := int64(binary.BigEndian.Uint64(data[pos:]))
				size := 12 + int64(int32(binary.BigEndian.Uint32(data[pos+8:])))
				if size < 61 || pos+size > int64(len(data)) {
					break
				}
				if off >= rp || base >= rp {
					cuts = append(cuts, pos)
				}
				pos += size
			}
			if len(cuts) == 0 {
				continue
			}
			cut := cuts[rng.IntN(len(cuts))]
			if err := os.Truncate(seg, cut); err != nil {
				return total, err
			}
			total += int64(len(data)) - cut
		}
	}
	return total, nil
}

// readAll reads every partition of topic from its start to its end offset
// as the cluster reports it now. Partitions that have no leader for half
// the time limit are left out and returned as unread.
func (c *pcluster) readAll(name string, timeout time.Duration) ([]Read, map[int32]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.bootstrap()...), kgo.ConsumeTopics(name), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	var ends kadm.ListedOffsets
	endsBy := time.Now().Add(timeout / 2)
	for {
		ends, err = kadm.NewClient(cl).ListEndOffsets(ctx, name)
		if err == nil && ends.Error() == nil {
			break
		}
		if len(ends) > 0 && time.Now().After(endsBy) {
			break // read the partitions that have a leader
		}
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("end offsets: %v", err)
		}
		time.Sleep(200 * time.Millisecond) // leaders are being elected
	}
	unread := map[int32]bool{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			unread[o.Partition] = true
		}
	})
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			want[o.Partition] = o.Offset
		}
	})
	var out []Read
	next := map[int32]int64{}
	done := func() bool {
		for p, e := range want {
			if next[p] < e {
				return false
			}
		}
		return true
	}
	idle := 0
	for !done() {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		if ctx.Err() != nil {
			return out, unread, fmt.Errorf("final read incomplete: %v of %v", next, want)
		}
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			out = append(out, Read{Reader: -1, Partition: r.Partition, Offset: r.Offset, Value: string(r.Value), Final: true})
			if r.Offset+1 > next[r.Partition] {
				next[r.Partition] = r.Offset + 1
			}
		})
		if n == 0 {
			// Control batches at a log's end hold offsets no record has:
			// a few empty polls in a row mean the end is reached.
			if idle++; idle >= 3 {
				break
			}
		} else {
			idle = 0
		}
	}
	return out, unread, nil
}

// admin returns a client and its kadm.
func (c *pcluster) admin() (*kgo.Client, *kadm.Client, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.bootstrap()...))
	if err != nil {
		return nil, nil, err
	}
	return cl, kadm.NewClient(cl), nil
}

// addSpare starts the spare node and moves one replica of a random
// partition onto it, under load, waiting (bounded) for the move to end.
func (c *pcluster) addSpare(rng *rand.Rand) (string, error) {
	sp := c.spare
	if !sp.running() {
		if err := c.start(sp, 0); err != nil {
			return "", err
		}
	}
	cl, adm, err := c.admin()
	if err != nil {
		return "", err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// The spare is a member once a node lists it among its brokers.
	for !c.listsBroker(sp.id) {
		if ctx.Err() != nil {
			return "", fmt.Errorf("node %d did not join", sp.id)
		}
		time.Sleep(200 * time.Millisecond) // polling membership until the deadline
	}
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return "", err
	}
	ps := td[topic].Partitions.Sorted()
	var cands []kadm.PartitionDetail
	for _, p := range ps {
		if _, moved := c.moved[p.Partition]; !moved && !slices.Contains(p.Replicas, int32(sp.id)) {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		return "every partition already has a replica on the spare", nil
	}
	p := cands[rng.IntN(len(cands))]
	target := append([]int32(nil), p.Replicas...)
	out := rng.IntN(len(target))
	target[out] = int32(sp.id)
	// Recorded before the move: one that does not end in time goes on in
	// the cluster, and the heal has to move it back all the same.
	c.moved[p.Partition] = p.Replicas
	if err := c.reassign(ctx, adm, p.Partition, target); err != nil {
		c.dump("member-add")
		return "", err
	}
	return fmt.Sprintf("node %d added; partition %d moved %v → %v", sp.id, p.Partition, p.Replicas, target), nil
}

// removeSpare moves every partition with a replica on the spare back
// where it was, and stops the spare once none has one: what the cluster
// says of its assignment decides, not what the nemesis thinks it did (a
// move that did not end in time may end later).
func (c *pcluster) removeSpare() {
	cl, adm, err := c.admin()
	if err != nil {
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sp := int32(c.spare.id)
	onSpare := func() (map[int32][]int32, error) {
		td, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return nil, err
		}
		out := map[int32][]int32{}
		for _, pd := range td[topic].Partitions {
			if slices.Contains(pd.Replicas, sp) {
				out[pd.Partition] = pd.Replicas
			}
		}
		return out, nil
	}
	held, err := onSpare()
	if err != nil {
		return
	}
	for p, reps := range held {
		back, ok := c.moved[p]
		if !ok || slices.Contains(back, sp) {
			// Not a move of the nemesis: the spare's replica goes to a
			// node that has none.
			back = nil
			for _, nd := range c.nodes {
				if id := int32(nd.id); !slices.Contains(reps, id) && len(back) == 0 {
					back = append([]int32(nil), reps...)
					back[slices.Index(back, sp)] = id
				}
			}
		}
		if back == nil {
			continue
		}
		if err := c.reassign(ctx, adm, p, back); err != nil {
			c.dump("member-remove")
			continue
		}
		delete(c.moved, p)
	}
	if held, err = onSpare(); err != nil || len(held) > 0 {
		return // the spare keeps running while it holds a replica
	}
	clear(c.moved)
	if c.spare.running() {
		c.spare.signal(syscall.SIGTERM)
		select {
		case <-c.spare.done:
		case <-time.After(30 * time.Second):
			c.spare.kill()
		}
	}
}

// dump saves what every running node is doing (its goroutines and its
// /v1/status) under stuck/ in the results folder, for a heal that did not
// come: the nodes are started with --pprof.
func (c *pcluster) dump(label string) {
	dir := filepath.Join(c.out, "stuck")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	stamp := time.Now().UTC().Format("150405.000")
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, nd := range append(append([]*pnode(nil), c.nodes...), c.spare) {
		if nd == nil || !nd.running() {
			continue
		}
		for _, what := range []struct{ path, name string }{
			{"/debug/pprof/goroutine?debug=2", "goroutines"}, {"/v1/status", "status"},
		} {
			resp, err := hc.Get("http://" + nd.httpAddr + what.path)
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%s-n%d-%s.txt", stamp, label, nd.id, what.name)), b, 0o644)
		}
	}
}

// reassign asks for partition p of the test topic to move to replicas,
// and waits until the move is done.
func (c *pcluster) reassign(ctx context.Context, adm *kadm.Client, p int32, replicas []int32) error {
	for {
		var req kadm.AlterPartitionAssignmentsReq
		req.Assign(topic, p, replicas)
		resp, err := adm.AlterPartitionAssignments(ctx, req)
		if err == nil {
			err = resp.Error()
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("reassign partition %d to %v: %w", p, replicas, err)
		}
		time.Sleep(500 * time.Millisecond) // a leader being elected: retry until the deadline
	}
	for {
		td, err := adm.ListTopics(ctx, topic)
		if err == nil {
			if pd, ok := td[topic].Partitions[p]; ok && sameSet(pd.Replicas, replicas) {
				lr, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{topic: {p: {}}})
				if err == nil {
					if _, moving := lr[topic][p]; !moving {
						return nil
					}
				}
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("partition %d did not reach %v", p, replicas)
		}
		time.Sleep(200 * time.Millisecond) // polling the move until the deadline
	}
}

func sameSet(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// listsBroker reports whether a running node's /v1/status lists broker id.
func (c *pcluster) listsBroker(id int) bool {
	for _, nd := range c.nodes {
		if !nd.running() {
			continue
		}
		resp, err := http.Get("http://" + nd.httpAddr + "/v1/status")
		if err != nil {
			continue
		}
		var st struct {
			Brokers []struct {
				NodeID int `json:"node_id"`
			} `json:"brokers"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			continue
		}
		for _, b := range st.Brokers {
			if b.NodeID == id {
				return true
			}
		}
		return false
	}
	return false
}
