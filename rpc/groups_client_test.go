package rpc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupTestConfig lets clients ask for short sessions.
var groupTestConfig = GroupConfig{MinSessionTimeout: 100 * time.Millisecond}

// startGroupServer serves a memBroker with a topic of n partitions.
func startGroupServer(t *testing.T, topic string, partitions int32) (*memBroker, *Server, string) {
	t.Helper()
	b := newMemBroker(t)
	if err := b.CreateTopic(testCtx(t), "", topic, partitions, 1, nil, false); err != nil {
		t.Fatal(err)
	}
	s, addr := startServer(t, b, WithGroupConfig(groupTestConfig))
	return b, s, addr
}

// produceValues produces values from..to-1 (keyed, spread over the
// partitions) to topic.
func produceValues(t *testing.T, addr, topic string, from, to int) {
	t.Helper()
	cl := newClient(t, addr, kgo.DefaultProduceTopic(topic))
	recs := make([]*kgo.Record, 0, to-from)
	for i := from; i < to; i++ {
		recs = append(recs, &kgo.Record{Key: []byte("k" + strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))})
	}
	if err := cl.ProduceSync(testCtx(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
}

// seen collects the values consumed by a group's members.
type seen struct {
	mu     sync.Mutex
	counts map[int]int
	by     map[int]string // value → last member that consumed it
}

func newSeen() *seen { return &seen{counts: make(map[int]int), by: make(map[int]string)} }

func (s *seen) add(member string, r *kgo.Record) {
	v, err := strconv.Atoi(string(r.Value))
	if err != nil {
		panic(fmt.Sprintf("value %q", r.Value))
	}
	s.mu.Lock()
	s.counts[v]++
	s.by[v] = member
	s.mu.Unlock()
}

// all reports whether every value in [0, n) was consumed.
func (s *seen) all(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range n {
		if s.counts[i] == 0 {
			return false
		}
	}
	return true
}

// gmember is a kgo group member consuming in a goroutine, tracking the
// partitions it owns through the rebalance callbacks.
type gmember struct {
	name string
	cl   *kgo.Client
	done chan struct{}

	mu                      sync.Mutex
	owned                   map[int32]bool
	assigned, revoked, lost int // callback calls
	firstOffset             map[int32]int64
	records                 int
	polled                  []*kgo.Record
	keep                    bool // keep polled records
	closed                  bool
	history                 []string
}

func startMember(t *testing.T, addr, group, topic, name string, sn *seen, opts ...kgo.Opt) *gmember {
	t.Helper()
	m := &gmember{name: name, done: make(chan struct{}), owned: make(map[int32]bool), firstOffset: make(map[int32]int64)}
	base := []kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.ClientID(name),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.SessionTimeout(10 * time.Second),
		kgo.RebalanceTimeout(20 * time.Second),
		kgo.AutoCommitInterval(200 * time.Millisecond),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.assigned++
			for _, p := range a[topic] {
				m.owned[p] = true
			}
			m.history = append(m.history, fmt.Sprintf("+%v", a[topic]))
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, r map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.revoked++
			for _, p := range r[topic] {
				delete(m.owned, p)
			}
			m.history = append(m.history, fmt.Sprintf("-%v", r[topic]))
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, l map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.lost++
			for _, p := range l[topic] {
				delete(m.owned, p)
			}
			m.history = append(m.history, fmt.Sprintf("lost%v", l[topic]))
		}),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	m.cl = cl
	t.Cleanup(m.close)
	go func() {
		defer close(m.done)
		for {
			fs := cl.PollFetches(context.Background())
			if fs.IsClientClosed() {
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				m.mu.Lock()
				if _, ok := m.firstOffset[r.Partition]; !ok {
					m.firstOffset[r.Partition] = r.Offset
				}
				m.records++
				if m.keep {
					m.polled = append(m.polled, r)
				}
				m.mu.Unlock()
				if sn != nil {
					sn.add(name, r)
				}
			})
		}
	}()
	return m
}

// close closes the client (leaving the group, but for static members) and
// waits for the poll loop.
func (m *gmember) close() {
	m.mu.Lock()
	closed := m.closed
	m.closed = true
	m.mu.Unlock()
	if closed {
		return
	}
	m.cl.Close()
	<-m.done
}

func (m *gmember) ownedSet() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.owned))
}

func (m *gmember) callbacks() (assigned, revoked, lost int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.assigned, m.revoked, m.lost
}

// balanced reports whether the members own every partition of [0, n),
// each partition once, evenly. Two members owning a partition at once is
// a failure.
func balanced(t *testing.T, n int32, ms ...*gmember) bool {
	t.Helper()
	owner := make(map[int32]string)
	for _, m := range ms {
		for _, p := range m.ownedSet() {
			if o, ok := owner[p]; ok {
				t.Fatalf("partition %d owned by %s and %s", p, o, m.name)
			}
			owner[p] = m.name
		}
	}
	if len(owner) != int(n) {
		return false
	}
	for _, m := range ms {
		if got := len(m.ownedSet()); got < int(n)/len(ms) || got > (int(n)+len(ms)-1)/len(ms) {
			return false
		}
	}
	return true
}

// groupGeneration is the state and generation of a group on s.
func groupGeneration(s *Server, name string) (groupState, int32) {
	s.groups.mu.Lock()
	g := s.groups.groups[name]
	s.groups.mu.Unlock()
	if g == nil {
		return groupDead, 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state, g.generation
}

// TestKgoConsumerGroup runs a kgo consumer group of 3 members over 6
// partitions, with the default cooperative-sticky balancer and with the
// eager range one: every record is consumed, a member leaving and one
// joining move partitions, never two owners at once.
func TestKgoConsumerGroup(t *testing.T) {
	t.Run("cooperative-sticky", func(t *testing.T) { testConsumerGroup(t, "cooperative-sticky") })
	t.Run("range", func(t *testing.T) { testConsumerGroup(t, "range", kgo.Balancers(kgo.RangeBalancer())) })
}

func testConsumerGroup(t *testing.T, protocol string, opts ...kgo.Opt) {
	const (
		topic = "events"
		group = "workers"
		parts = 6
		n     = 3000
	)
	_, s, addr := startGroupServer(t, topic, parts)
	produceValues(t, addr, topic, 0, n)
	sn := newSeen()
	m1 := startMember(t, addr, group, topic, "m1", sn, opts...)
	m2 := startMember(t, addr, group, topic, "m2", sn, opts...)
	m3 := startMember(t, addr, group, topic, "m3", sn, opts...)
	waitFor(t, "3 balanced members", func() bool { return balanced(t, parts, m1, m2, m3) })
	waitFor(t, "every record consumed", func() bool { return sn.all(n) })

	adm := kadm.NewClient(newClient(t, addr))
	ctx := testCtx(t)
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	d := described[group]
	if d.Err != nil || d.State != "Stable" || d.ProtocolType != "consumer" || d.Protocol != protocol || len(d.Members) != 3 {
		t.Fatalf("described: %+v", d)
	}
	if got := described.AssignedPartitions()[topic]; len(got) != parts {
		t.Fatalf("assigned partitions %v", got)
	}
	_, gen := groupGeneration(s, group)

	// m3 leaves: m1 and m2 take its partitions.
	a1, _, _ := m1.callbacks()
	a2, _, _ := m2.callbacks()
	m3.close()
	if _, revoked, _ := m3.callbacks(); revoked == 0 {
		t.Fatal("m3 left without its partitions revoked")
	}
	waitFor(t, "2 balanced members", func() bool { return balanced(t, parts, m1, m2) })
	if b1, _, _ := m1.callbacks(); b1 == a1 {
		if b2, _, _ := m2.callbacks(); b2 == a2 {
			t.Fatal("no partitions assigned after m3 left")
		}
	}
	if _, after := groupGeneration(s, group); after <= gen {
		t.Fatalf("generation %d after a member left, was %d", after, gen)
	}

	// m4 joins: the partitions spread again.
	m4 := startMember(t, addr, group, topic, "m4", sn, opts...)
	waitFor(t, "3 balanced members again", func() bool { return balanced(t, parts, m1, m2, m4) && len(m4.ownedSet()) == 2 })
	produceValues(t, addr, topic, n, n+600)
	waitFor(t, "the later records consumed", func() bool { return sn.all(n + 600) })
	sn.mu.Lock()
	m4got := 0
	for v := n; v < n+600; v++ {
		if sn.by[v] == "m4" {
			m4got++
		}
	}
	sn.mu.Unlock()
	if m4got == 0 {
		t.Fatal("m4 consumed none of the later records")
	}
	t.Logf("%s: m1 %v, m2 %v, m3 %v, m4 %v", protocol, m1.history, m2.history, m3.history, m4.history)
}

// TestKgoGroupCommitResume: a member commits what it polled and closes; a
// new member resumes exactly at the committed offsets.
func TestKgoGroupCommitResume(t *testing.T) {
	const (
		topic = "orders"
		group = "billing"
		parts = 3
	)
	_, _, addr := startGroupServer(t, topic, parts)
	produceValues(t, addr, topic, 0, 1500)
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, addr))

	// A member polls about half, by hand, and commits what it polled.
	cl := newClient(t, addr,
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(), kgo.HeartbeatInterval(100*time.Millisecond), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.FetchMaxPartitionBytes(2<<10))
	first := make(map[int]bool)
	next := make(map[int32]int64)
	for len(first) < 700 {
		fs := cl.PollRecords(ctx, 50)
		if err := ctx.Err(); err != nil {
			t.Fatalf("polled %d: %v", len(first), err)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("partition %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			v, _ := strconv.Atoi(string(r.Value))
			first[v] = true
			next[r.Partition] = r.Offset + 1
		})
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	fetched, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	for p, off := range next {
		if o, ok := fetched.Lookup(topic, p); !ok || o.Err != nil || o.At != off {
			t.Fatalf("partition %d: committed %+v, want %d", p, o, off)
		}
	}
	cl.Close()

	produceValues(t, addr, topic, 1500, 2000)
	sn := newSeen()
	m := startMember(t, addr, group, topic, "resumer", sn)
	waitFor(t, "the rest consumed", func() bool {
		sn.mu.Lock()
		defer sn.mu.Unlock()
		return len(sn.counts)+len(first) >= 2000
	})
	m.mu.Lock()
	for p := range int32(parts) {
		want := next[p] // 0 when nothing was committed
		if got, ok := m.firstOffset[p]; ok && got != want {
			t.Errorf("partition %d: resumed at %d, committed %d", p, got, want)
		}
	}
	m.mu.Unlock()
	sn.mu.Lock()
	for v := range sn.counts {
		if first[v] {
			t.Errorf("value %d consumed again after its commit", v)
		}
	}
	for v := range 2000 {
		if !first[v] && sn.counts[v] == 0 {
			t.Errorf("value %d never consumed", v)
		}
	}
	sn.mu.Unlock()
	// The resumer's autocommits reach the end.
	waitCommittedToEnd(t, addr, group, topic)
}

// cutDialer dials normally until cut: then it closes its connections and
// refuses new ones (a member's host vanished).
type cutDialer struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (d *cutDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return nil, errors.New("network cut")
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *cutDialer) setCut(cut bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = cut
	if cut {
		for _, c := range d.conns {
			c.Close()
		}
		d.conns = nil
	}
}

// TestKgoGroupSessionTimeout: a member whose host vanishes (it neither
// heartbeats nor leaves) is evicted after its session timeout; its
// partitions go to the other member.
func TestKgoGroupSessionTimeout(t *testing.T) {
	const (
		topic   = "jobs"
		group   = "runners"
		parts   = 6
		session = time.Second
	)
	_, s, addr := startGroupServer(t, topic, parts)
	produceValues(t, addr, topic, 0, 600)
	sn := newSeen()
	m1 := startMember(t, addr, group, topic, "survivor", sn)
	d := &cutDialer{}
	m2 := startMember(t, addr, group, topic, "doomed", sn, kgo.SessionTimeout(session), kgo.Dialer(d.DialContext))
	waitFor(t, "2 balanced members", func() bool { return balanced(t, parts, m1, m2) })
	waitFor(t, "the records consumed", func() bool { return sn.all(600) })
	_, gen := groupGeneration(s, group)

	d.setCut(true)
	cutAt := time.Now()
	waitFor(t, "the survivor to own every partition", func() bool { return len(m1.ownedSet()) == parts })
	if elapsed := time.Since(cutAt); elapsed < session-200*time.Millisecond {
		t.Fatalf("evicted %v after the cut, before the session timeout %v", elapsed, session)
	}
	described, err := kadm.NewClient(newClient(t, addr)).DescribeGroups(testCtx(t), group)
	if err != nil {
		t.Fatal(err)
	}
	if g := described[group]; len(g.Members) != 1 || g.Members[0].ClientID != "survivor" || g.State != "Stable" {
		t.Fatalf("after the eviction: %+v", g)
	}
	if _, after := groupGeneration(s, group); after <= gen {
		t.Fatalf("generation %d, was %d", after, gen)
	}
	produceValues(t, addr, topic, 600, 1200)
	waitFor(t, "the later records consumed by the survivor", func() bool { return sn.all(1200) })
	d.setCut(false) // let the doomed member close cleanly
}

// TestKgoGroupStatic: a static member (instance id) that restarts within
// its session timeout gets its partitions back without a rebalance.
func TestKgoGroupStatic(t *testing.T) {
	const (
		topic = "static"
		group = "statics"
		parts = 6
	)
	_, s, addr := startGroupServer(t, topic, parts)
	produceValues(t, addr, topic, 0, 300)
	sn := newSeen()
	s1 := startMember(t, addr, group, topic, "s1", sn, kgo.InstanceID("instance-1"))
	waitFor(t, "s1 to own everything", func() bool { return len(s1.ownedSet()) == parts })
	s2 := startMember(t, addr, group, topic, "s2", sn, kgo.InstanceID("instance-2"))
	waitFor(t, "2 balanced members", func() bool { return balanced(t, parts, s1, s2) })
	// Cooperative rebalancing takes s1 through two rounds when s2 joins:
	// it revokes half in the first and rejoins for the second, whose
	// callbacks may come after s2 already owns its half.
	waitFor(t, "s1 through both cooperative rounds", func() bool { a, _, _ := s1.callbacks(); return a >= 3 })
	waitFor(t, "the group stable", func() bool { st, _ := groupGeneration(s, group); return st == groupStable })
	state, gen := groupGeneration(s, group)
	owned2 := s2.ownedSet()
	a1, r1, l1 := s1.callbacks()
	adm := kadm.NewClient(newClient(t, addr))
	ctx := testCtx(t)
	memberOf := func(instance string) string {
		t.Helper()
		described, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range described[group].Members {
			if m.InstanceID != nil && *m.InstanceID == instance {
				return m.MemberID
			}
		}
		t.Fatalf("no member of instance %s in %+v", instance, described[group])
		return ""
	}
	old := memberOf("instance-2")

	// s2 stops (a static member does not leave) and comes back.
	s2.close()
	if st, g := groupGeneration(s, group); st != state || g != gen {
		t.Fatalf("after s2 stopped: %s generation %d, was %s %d", st, g, state, gen)
	}
	s2b := startMember(t, addr, group, topic, "s2-again", sn, kgo.InstanceID("instance-2"))
	waitFor(t, "the restarted s2 to own its partitions", func() bool { return slices.Equal(s2b.ownedSet(), owned2) })
	if st, g := groupGeneration(s, group); st != groupStable || g != gen {
		t.Fatalf("after the static rejoin: %s generation %d, want Stable %d", st, g, gen)
	}
	if a, r, l := s1.callbacks(); a != a1 || r != r1 || l != l1 {
		t.Fatalf("s1 saw a rebalance: %v", s1.history)
	}
	if now := memberOf("instance-2"); now == old {
		t.Fatalf("instance-2 kept member id %s", now)
	}
	produceValues(t, addr, topic, 300, 600)
	waitFor(t, "the later records consumed", func() bool { return sn.all(600) })
}

// TestKadmGroups covers the admin group APIs through kadm.
func TestKadmGroups(t *testing.T) {
	const topic = "admin"
	b, _, addr := startGroupServer(t, topic, 2)
	produceValues(t, addr, topic, 0, 100)
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, addr))

	// A simple (generation -1) commit to a group without members.
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: topic, Partition: 0, At: 10, LeaderEpoch: 1, Metadata: "m0"})
	os.Add(kadm.Offset{Topic: topic, Partition: 1, At: 20, LeaderEpoch: -1})
	committed, err := adm.CommitOffsets(ctx, "simple", os)
	if err != nil || committed.Error() != nil {
		t.Fatalf("commit: %v %v", err, committed.Error())
	}
	var bad kadm.Offsets
	bad.Add(kadm.Offset{Topic: "nope", Partition: 0, At: 1})
	bad.Add(kadm.Offset{Topic: topic, Partition: 7, At: 1})
	if r, err := adm.CommitOffsets(ctx, "simple", bad); err != nil {
		t.Fatal(err)
	} else if o, _ := r.Lookup("nope", 0); !errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("commit to an unknown topic: %+v", o)
	} else if o, _ := r.Lookup(topic, 7); !errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("commit to an unknown partition: %+v", o)
	}
	fetched, err := adm.FetchOffsets(ctx, "simple")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := fetched.Lookup(topic, 0); o.At != 10 || o.LeaderEpoch != 1 || o.Metadata != "m0" {
		t.Fatalf("fetched p0: %+v", o)
	}
	if o, _ := fetched.Lookup(topic, 1); o.At != 20 {
		t.Fatalf("fetched p1: %+v", o)
	}

	// An active group.
	m := startMember(t, addr, "active", topic, "worker", nil)
	waitFor(t, "the member to own both partitions", func() bool { return len(m.ownedSet()) == 2 })
	waitFor(t, "its commits", func() bool { return b.committed("active", topic, 0) >= 0 || b.committed("active", topic, 1) >= 0 })

	listed, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g := listed["active"]; g.State != "Stable" || g.ProtocolType != "consumer" || g.Coordinator != 1 {
		t.Fatalf("listed active: %+v", g)
	}
	if g := listed["simple"]; g.State != "Empty" || g.ProtocolType != "" {
		t.Fatalf("listed simple: %+v", g)
	}
	if stable, err := adm.ListGroups(ctx, "Stable"); err != nil || len(stable) != 1 || stable["active"].Group != "active" {
		t.Fatalf("stable groups: %v %+v", err, stable)
	}

	described, err := adm.DescribeGroups(ctx, "active", "simple", "missing")
	if err != nil {
		t.Fatal(err)
	}
	if d := described["active"]; d.State != "Stable" || d.Protocol != "cooperative-sticky" || len(d.Members) != 1 ||
		d.Members[0].ClientID != "worker" || d.Members[0].ClientHost != "/127.0.0.1" || d.Coordinator.NodeID != 1 {
		t.Fatalf("described active: %+v", d)
	} else if c, ok := d.Members[0].Assigned.AsConsumer(); !ok || len(c.Topics) != 1 || len(c.Topics[0].Partitions) != 2 {
		t.Fatalf("assignment: %+v", d.Members[0].Assigned)
	} else if meta, ok := d.Members[0].Join.AsConsumer(); !ok || !slices.Equal(meta.Topics, []string{topic}) {
		t.Fatalf("metadata: %+v", d.Members[0].Join)
	}
	if d := described["simple"]; d.State != "Empty" || len(d.Members) != 0 || d.Err != nil {
		t.Fatalf("described simple: %+v", d)
	}
	if d := described["missing"]; d.State != "Dead" || d.Err != nil {
		t.Fatalf("described missing: %+v", d)
	}
	all, err := adm.DescribeGroups(ctx) // lists, then describes
	if err != nil || len(all) != 2 {
		t.Fatalf("describe all: %v %+v", err, all)
	}

	// Several groups at once (OffsetFetch v8).
	many := adm.FetchManyOffsets(ctx, "active", "simple", "missing")
	if many["simple"].Err != nil || len(many["simple"].Fetched[topic]) != 2 || many["missing"].Err != nil || len(many["missing"].Fetched) != 0 {
		t.Fatalf("fetch many: %+v", many)
	}

	// Offsets of a topic the group consumes stay.
	del, err := adm.DeleteOffsets(ctx, "active", kadm.TopicsSet{topic: {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := del.Lookup(topic, 0); !errors.Is(e, kerr.GroupSubscribedToTopic) {
		t.Fatalf("delete offsets of a consumed topic: %v", e)
	}
	del, err = adm.DeleteOffsets(ctx, "simple", kadm.TopicsSet{topic: {1: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := del.Lookup(topic, 1); e != nil || b.committed("simple", topic, 1) != -1 || b.committed("simple", topic, 0) != 10 {
		t.Fatalf("delete offsets: %v", e)
	}
	if _, err := adm.DeleteOffsets(ctx, "missing", kadm.TopicsSet{topic: {1: {}}}); !errors.Is(err, kerr.GroupIDNotFound) {
		t.Fatalf("delete offsets of a missing group: %v", err)
	}

	// Groups with members are not deleted.
	dg, err := adm.DeleteGroups(ctx, "active", "simple", "missing")
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(dg["active"].Err, kerr.NonEmptyGroup) || dg["simple"].Err != nil || !errors.Is(dg["missing"].Err, kerr.GroupIDNotFound) {
		t.Fatalf("delete groups: %+v", dg)
	}
	if slices.Contains(b.OffsetGroups(), "simple") {
		t.Fatal("simple still has offsets")
	}
	m.close()
	waitFor(t, "the active group to empty", func() bool {
		d, err := adm.DescribeGroups(ctx, "active")
		return err == nil && d["active"].State == "Empty"
	})
	del, err = adm.DeleteOffsets(ctx, "active", kadm.TopicsSet{topic: {0: {}}})
	if e, _ := del.Lookup(topic, 0); err != nil || e != nil {
		t.Fatalf("delete offsets once empty: %v %v", err, e)
	}
	if dg, err := adm.DeleteGroups(ctx, "active"); err != nil || dg["active"].Err != nil {
		t.Fatalf("delete once empty: %v %+v", err, dg)
	}
	if groups := b.OffsetGroups(); len(groups) != 0 {
		t.Fatalf("offsets left: %v", groups)
	}
}

// TestGroupCoordinatorMoves: once the coordinator is another node, every
// group API answers NOT_COORDINATOR and the groups are dropped; when the
// role comes back the members rejoin.
func TestGroupCoordinatorMoves(t *testing.T) {
	const (
		topic = "moving"
		group = "movers"
	)
	b, s, addr := startGroupServer(t, topic, 2)
	produceValues(t, addr, topic, 0, 100)
	sn := newSeen()
	m := startMember(t, addr, group, topic, "mover", sn)
	waitFor(t, "the member to own both partitions", func() bool { return len(m.ownedSet()) == 2 })
	waitFor(t, "the records consumed", func() bool { return sn.all(100) })
	_, id := rawMember(t, s, group)

	b.moveCoordinator(2)
	r := dialRaw(t, addr)
	reqs := []kmsg.Request{
		joinReq(9, group, "", nil),
		&kmsg.SyncGroupRequest{Version: 5, Group: group, MemberID: id, Generation: 1},
		&kmsg.HeartbeatRequest{Version: 4, Group: group, MemberID: id, Generation: 1},
		&kmsg.LeaveGroupRequest{Version: 5, Group: group, Members: []kmsg.LeaveGroupRequestMember{{MemberID: id}}},
		&kmsg.OffsetCommitRequest{Version: 8, Group: group, Generation: -1, Topics: []kmsg.OffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1, LeaderEpoch: -1}}}}},
		&kmsg.OffsetFetchRequest{Version: 8, Groups: []kmsg.OffsetFetchRequestGroup{{Group: group}}},
		&kmsg.OffsetFetchRequest{Version: 7, Group: group},
		&kmsg.OffsetFetchRequest{Version: 1, Group: group, Topics: []kmsg.OffsetFetchRequestTopic{{Topic: topic, Partitions: []int32{0}}}},
		&kmsg.DescribeGroupsRequest{Version: 5, Groups: []string{group}},
		&kmsg.DeleteGroupsRequest{Version: 2, Groups: []string{group}},
		&kmsg.OffsetDeleteRequest{Version: 0, Group: group},
	}
	for _, req := range reqs {
		codes := errorCodes(t, r.roundTrip(req))
		if !slices.Contains(codes, kerr.NotCoordinator.Code) || slices.ContainsFunc(codes, func(c int16) bool { return c != 0 && c != kerr.NotCoordinator.Code }) {
			t.Fatalf("%s v%d: codes %v, want NOT_COORDINATOR", kmsg.NameForKey(req.Key()), req.GetVersion(), codes)
		}
	}
	if st, _ := groupGeneration(s, group); st != groupDead {
		t.Fatalf("group still held: %s", st)
	}
	fc := &kmsg.FindCoordinatorRequest{Version: 4, CoordinatorKeys: []string{group}}
	if resp := r.roundTrip(fc).(*kmsg.FindCoordinatorResponse); resp.Coordinators[0].ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("find a coordinator not among the brokers: %+v", resp)
	}
	list := &kmsg.ListGroupsRequest{Version: 4}
	if resp := r.roundTrip(list).(*kmsg.ListGroupsResponse); resp.ErrorCode != 0 || len(resp.Groups) != 0 {
		t.Fatalf("list on another node than the coordinator: %+v", resp)
	}
	b.moveCoordinator(-1)
	if resp := r.roundTrip(list).(*kmsg.ListGroupsResponse); resp.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("list without a coordinator: %+v", resp)
	}

	// The role comes back: the member rejoins and consumes on.
	b.moveCoordinator(1)
	waitFor(t, "the member to rejoin", func() bool { st, _ := groupGeneration(s, group); return st == groupStable })
	produceValues(t, addr, topic, 100, 200)
	waitFor(t, "the later records consumed", func() bool { return sn.all(200) })
}

// rawMember returns a member id of a group held by s.
func rawMember(t *testing.T, s *Server, group string) (*group, string) {
	t.Helper()
	s.groups.mu.Lock()
	g := s.groups.groups[group]
	s.groups.mu.Unlock()
	if g == nil {
		t.Fatalf("no group %s", group)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for id := range g.members {
		return g, id
	}
	t.Fatalf("group %s has no member", group)
	return nil, ""
}

// TestFindCoordinator covers the key types and the batch of v4.
func TestFindCoordinator(t *testing.T) {
	b, _, addr := startGroupServer(t, "t", 1)
	r := dialRaw(t, addr)
	for v := int16(0); v <= 3; v++ {
		resp := r.roundTrip(&kmsg.FindCoordinatorRequest{Version: v, CoordinatorKey: "g"}).(*kmsg.FindCoordinatorResponse)
		if resp.ErrorCode != 0 || resp.NodeID != 1 || resp.Host != "127.0.0.1" || resp.Port != b.port.Load() {
			t.Fatalf("v%d: %+v", v, resp)
		}
	}
	resp := r.roundTrip(&kmsg.FindCoordinatorRequest{Version: 3, CoordinatorKey: "tx", CoordinatorType: 1}).(*kmsg.FindCoordinatorResponse)
	if resp.ErrorCode != kerr.CoordinatorNotAvailable.Code || resp.NodeID != -1 || resp.ErrorMessage == nil {
		t.Fatalf("transaction coordinator: %+v", resp)
	}
	resp = r.roundTrip(&kmsg.FindCoordinatorRequest{Version: 4, CoordinatorKeys: []string{"a", "b"}, CoordinatorType: 0}).(*kmsg.FindCoordinatorResponse)
	if len(resp.Coordinators) != 2 || resp.Coordinators[1].Key != "b" || resp.Coordinators[1].NodeID != 1 || resp.Coordinators[0].ErrorCode != 0 {
		t.Fatalf("batch: %+v", resp)
	}
	resp = r.roundTrip(&kmsg.FindCoordinatorRequest{Version: 4, CoordinatorKeys: []string{"a"}, CoordinatorType: 7}).(*kmsg.FindCoordinatorResponse)
	if resp.Coordinators[0].ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("unknown key type: %+v", resp)
	}
	b.moveCoordinator(-1)
	resp = r.roundTrip(&kmsg.FindCoordinatorRequest{Version: 2, CoordinatorKey: "g"}).(*kmsg.FindCoordinatorResponse)
	if resp.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("no coordinator: %+v", resp)
	}
}

// plainBroker hides memBroker's GroupBroker methods.
type plainBroker struct{ Broker }

// TestGroupAPIsNeedGroupBroker: without a GroupBroker the group APIs are
// not advertised, and a request of one closes the connection, as any key
// not served.
func TestGroupAPIsNeedGroupBroker(t *testing.T) {
	_, addr := startServer(t, plainBroker{newMemBroker(t)})
	r := dialRaw(t, addr)
	resp := r.roundTrip(apiVersionsReq(3)).(*kmsg.ApiVersionsResponse)
	if !slices.EqualFunc(resp.ApiKeys, apiKeys(false), func(a, b kmsg.ApiVersionsResponseApiKey) bool {
		return a.ApiKey == b.ApiKey && a.MinVersion == b.MinVersion && a.MaxVersion == b.MaxVersion
	}) {
		t.Fatalf("advertised %v", resp.ApiKeys)
	}
	for _, k := range resp.ApiKeys {
		if handlers[k.ApiKey].group {
			t.Fatalf("group API %s advertised", kmsg.NameForKey(k.ApiKey))
		}
	}
	if len(apiKeys(false)) >= len(apiKeys(true)) {
		t.Fatal("no group API in the table")
	}
	r.write(&kmsg.FindCoordinatorRequest{Version: 3, CoordinatorKey: "g"})
	r.expectClosed()
}
