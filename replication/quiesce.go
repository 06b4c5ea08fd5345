package replication

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Quiescence: idle groups cost nothing per follower.
//
// An idle hashicorp/raft leader sends each follower an empty
// AppendEntries every CommitTimeout and a heartbeat every tenth of the
// HeartbeatTimeout, and each follower times out unless it hears them: the
// cost of an idle cluster grows with partitions × followers. A Quiescer
// (one per node) replaces those messages, for groups that are idle, with
// one link per pair of nodes that carries a tick and what changed:
//
//   - A follower whose replica answered an empty append that left it
//     caught up (its last entry is the leader's commit, and it took no
//     entries for a while), while the link from the leader's node is
//     alive, quiesces: it raises its Raft heartbeat and election timeouts
//     out of reach (raft.ReloadConfig) and tells the leader's node
//     "quiesced at (term, index)".
//   - The leader's transport then answers, on the follower's behalf,
//     exactly those requests that carry nothing new for it: heartbeats of
//     that term and empty appends whose previous entry and commit are that
//     index, while the follower's link is alive. An answer of this kind
//     moves no match index (only entries do), so it cannot commit
//     anything; it only keeps the leader's lease. Every other request goes
//     to the follower as before.
//   - The follower wakes (its timeouts back as configured, the leader told
//     "woke") on the first request carrying anything new, when its Raft
//     state changes, when the leader's node tells that it stopped leading
//     the group, and when the link from the leader's node ends or stays
//     silent for Dead (the node died, paused or was cut off).
//   - When the link from a node ends and no link of the same incarnation
//     replaces it within two ticks, every group led from that node,
//     quiesced or not, elects at once: the voters left on live nodes take
//     turns, in an order drawn from the group's name, to campaign as on a
//     leadership transfer while the others hold their own campaigns
//     (leaderGone). So a node's death costs each group it led one
//     vote's round trip rather than its election timeout, no candidate
//     opposes another, and the groups' leadership spreads over the nodes
//     left.
//
// Link protocol (frozen), on a direct connection to the mux group named
// quiesceStream (ControlLayer; a session stream to a peer that takes no
// direct connections), one each way per pair of nodes, the dialer
// sending and the acceptor reading. On the session, a link waited
// behind the bulk traffic of thousands of groups and ended with every
// session closed for it, and a node that was merely busy was taken for
// gone for minutes:
//
//	hello:  8 bytes the sender's incarnation (random per Quiescer),
//	        uvarint length of the sender's mux address, the address
//	then messages: 1 byte kind
//	  kindTick      nothing more: the sender is alive
//	  kindFollower  uvarint group length, group, uvarint term, uvarint index:
//	                the sender's replica follows the receiver quiesced
//	  kindWoke      uvarint group length, group: it does not any more
//	  kindLeaderWake uvarint group length, group: the sender's replica no
//	                longer leads the group; its quiesced followers wake
//
// A receiver forgets everything a link told when it ends; a dialer starts
// each link with what holds now.
type Quiescer struct {
	mux    *Mux
	layer  raft.StreamLayer
	logger hclog.Logger
	tick   time.Duration
	dead   time.Duration
	inc    uint64

	mu    sync.RWMutex // peer, taken for every empty append a leader sends, reads
	out   map[raft.ServerAddress]*outLink
	peers map[raft.ServerAddress]*peerIn
	// departing is the incarnation of each peer whose link ended while
	// failover waits to see whether it links again.
	departing map[raft.ServerAddress]uint64
	// gone is the peers whose link ended and did not come back
	// (raft.ServerAddress → struct{}): dead, until they link again or a
	// request comes from them. Read without a lock: every request a
	// replica here receives asks it (heard).
	gone   sync.Map
	groups map[string]*groupQuiesce
	closed bool

	// campaigns bounds the takeovers (leaderGone) under way at once.
	campaigns chan struct{}
	// campaigned is when each peer's node last asked a replica here for
	// its vote as a leadership transfer's candidate (a takeover's):
	// raft.ServerAddress → unix nanoseconds (*atomic.Int64).
	campaigned sync.Map

	stop chan struct{}
	wg   sync.WaitGroup
}

// QuiescerConfig configures a Quiescer; zero fields take defaults.
type QuiescerConfig struct {
	// Tick is how often a link carries a tick (default 250ms).
	Tick time.Duration
	// Dead is how long a silent link is taken for a dead node (default
	// 2.5s): its quiesced groups wake.
	Dead   time.Duration
	Logger hclog.Logger
}

// quiesceStream names the links on the mux; no group is named with a
// leading '/'.
const quiesceStream = "/quiesce"

// quiescedTimeout is the heartbeat and election timeout of a quiesced
// follower: out of reach, since only a wake lowers it.
const quiescedTimeout = time.Hour

// quietLeaderLeases is the heartbeat timeout of a leader whose followers
// are all quiesced, in leases: its heartbeats go out every quarter to
// half a lease (raft sends one every tenth to fifth of the timeout),
// answered here, and keep its lease; nothing else need go out until the
// next CommitTimeout, which carries the commit index.
const quietLeaderLeases = 5 / 2.0

// quiesceIdle is how long a follower must have taken no entries before it
// quiesces, so that a group under load does not quiesce and wake between
// its writes.
const quiesceIdle = time.Second

const (
	kindTick byte = iota
	kindFollower
	kindWoke
	kindLeaderWake
)

// NewQuiescer starts the node's quiescence links on m.
func NewQuiescer(m *Mux, cfg QuiescerConfig) (*Quiescer, error) {
	if cfg.Tick <= 0 {
		cfg.Tick = 250 * time.Millisecond
	}
	if cfg.Dead <= 0 {
		cfg.Dead = 2500 * time.Millisecond
	}
	if cfg.Dead < 2*cfg.Tick {
		return nil, fmt.Errorf("replication: quiescence Dead %v under two ticks of %v", cfg.Dead, cfg.Tick)
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	layer, err := m.ControlLayer(quiesceStream)
	if err != nil {
		return nil, err
	}
	q := &Quiescer{
		mux: m, layer: layer, logger: cfg.Logger, tick: cfg.Tick, dead: cfg.Dead, inc: rand.Uint64() | 1, // 0: none
		out: map[raft.ServerAddress]*outLink{}, peers: map[raft.ServerAddress]*peerIn{}, departing: map[raft.ServerAddress]uint64{},
		groups: map[string]*groupQuiesce{}, stop: make(chan struct{}), campaigns: make(chan struct{}, takeoverCampaigns),
	}
	q.wg.Add(1)
	go q.accept()
	return q, nil
}

// Close ends every link; the groups still registered stay as they are.
func (q *Quiescer) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	close(q.stop)
	var conns []net.Conn
	for _, p := range q.peers {
		conns = append(conns, p.conn)
	}
	q.mu.Unlock()
	q.layer.Close()
	for _, c := range conns {
		c.Close()
	}
	q.wg.Wait()
	return nil
}

// Quiesced is the number of this node's replicas that follow quiesced.
func (q *Quiescer) Quiesced() int {
	n := 0
	for _, g := range q.registered() {
		g.mu.Lock()
		if g.quiesced {
			n++
		}
		g.mu.Unlock()
	}
	return n
}

// peerIn is what a peer's link told this node.
type peerIn struct {
	conn  net.Conn
	inc   uint64
	heard atomic.Int64 // unix nanos of the last message
	// stalledAt is the node's stall time summed when the last message
	// came (stallClock.stalled).
	stalledAt atomic.Int64
	mu        sync.Mutex
	marks     map[string]followMark // groups it follows quiesced under this node
}

type followMark struct{ term, index uint64 }

// maxExcused bounds a link's silence, in Deads, however long this node
// stalled: a node starved for good still finds its dead peers.
const maxExcused = 4

// hear records a message from the peer at now.
func (q *Quiescer) hear(p *peerIn, now int64) {
	p.heard.Store(now)
	p.stalledAt.Store(q.mux.stalls.stalled(now))
}

// silentFor reports whether p's link has been silent for Dead of this
// node's running time (its own stalls left out, up to maxExcused Deads
// in all) at now, and if not, how much longer it may be.
func (q *Quiescer) silentFor(p *peerIn, now int64) (bool, time.Duration) {
	return q.mux.stalls.waited(p.heard.Load(), p.stalledAt.Load(), now, q.dead, maxExcused*q.dead)
}

// quiesceEvent is one message for a link.
type quiesceEvent struct {
	kind        byte
	group       string
	term, index uint64
}

func (e quiesceEvent) append(b []byte) []byte {
	b = append(b, e.kind)
	if e.kind == kindTick {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(e.group)))
	b = append(b, e.group...)
	if e.kind == kindFollower {
		b = binary.AppendUvarint(b, e.term)
		b = binary.AppendUvarint(b, e.index)
	}
	return b
}

// outLink is the link this node dials to a peer.
type outLink struct {
	addr  raft.ServerAddress
	mu    sync.Mutex
	queue []quiesceEvent
	kick  chan struct{}
}

func (l *outLink) send(e quiesceEvent) {
	l.mu.Lock()
	l.queue = append(l.queue, e)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// link returns the link to addr, starting it if there is none.
func (q *Quiescer) link(addr raft.ServerAddress) *outLink {
	q.mu.RLock() // taken on every request to a peer without a link
	l := q.out[addr]
	q.mu.RUnlock()
	if l != nil {
		return l
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if l = q.out[addr]; l != nil || q.closed {
		return l
	}
	l = &outLink{addr: addr, kick: make(chan struct{}, 1)}
	q.out[addr] = l
	q.wg.Add(1)
	go q.runOut(l)
	return l
}

// sendTo queues e for addr's link, starting it if need be.
func (q *Quiescer) sendTo(addr raft.ServerAddress, e quiesceEvent) {
	if l := q.link(addr); l != nil {
		l.send(e)
	}
}

// sendAll queues e for every link.
func (q *Quiescer) sendAll(e quiesceEvent) {
	q.mu.Lock()
	ls := make([]*outLink, 0, len(q.out))
	for _, l := range q.out {
		ls = append(ls, l)
	}
	q.mu.Unlock()
	for _, l := range ls {
		l.send(e)
	}
}

// runOut keeps the link to a peer up, redialing with a backoff, and
// writes its hello, what holds now, then events and ticks.
func (q *Quiescer) runOut(l *outLink) {
	defer q.wg.Done()
	backoff := q.tick
	for {
		select {
		case <-q.stop:
			return
		default:
		}
		c, err := q.layer.Dial(l.addr, q.dead)
		if err == nil {
			backoff = q.tick
			err = q.writeLink(l, c)
			c.Close()
		}
		if err != nil && !errors.Is(err, net.ErrClosed) {
			q.logger.Info("quiescence link to a peer ended", "peer", l.addr, "error", err, "retry_in", backoff)
		}
		t := time.NewTimer(backoff)
		select {
		case <-q.stop:
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 4*q.dead)
	}
}

func (q *Quiescer) writeLink(l *outLink, c net.Conn) error {
	// What was queued before belongs to an earlier link, which the peer
	// forgets: it learns what holds now instead.
	l.mu.Lock()
	l.queue = l.queue[:0]
	l.mu.Unlock()
	w := bufio.NewWriterSize(c, 4<<10)
	b := binary.BigEndian.AppendUint64(nil, q.inc)
	b = binary.AppendUvarint(b, uint64(len(q.mux.Addr())))
	b = append(b, q.mux.Addr()...)
	w.Write(b)
	for _, e := range q.followerMarks(l.addr) {
		b = e.append(b[:0])
		w.Write(b)
	}
	tick := time.NewTicker(q.tick)
	defer tick.Stop()
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		// Unblock a write to a peer that stopped reading.
		select {
		case <-q.stop:
			c.Close()
		case <-stopped:
		}
	}()
	ended := make(chan struct{})
	go func() {
		// The peer sends nothing on this stream: a read returns when it
		// closed its side, which it does when it took the link for silent
		// (its read deadline passed, as when its process was starved).
		// Writes into a half-closed stream still succeed, so only this
		// tells that the peer stopped listening: link again at once
		// rather than once the stream is reset.
		var b [1]byte
		c.Read(b[:])
		close(ended)
	}()
	for {
		l.mu.Lock()
		evs := l.queue
		l.queue = nil
		l.mu.Unlock()
		if len(evs) == 0 {
			evs = append(evs, quiesceEvent{kind: kindTick})
		}
		for _, e := range evs {
			b = e.append(b[:0])
			w.Write(b)
		}
		c.SetWriteDeadline(time.Now().Add(q.dead))
		if err := w.Flush(); err != nil {
			return err
		}
		select {
		case <-q.stop:
			return nil
		case <-ended:
			return errLinkDropped
		case <-l.kick:
		case <-tick.C:
		}
	}
}

// errLinkDropped ends a link whose reader closed its side.
var errLinkDropped = errors.New("replication: the peer dropped the quiescence link")

// followerMarks are the kindFollower events of the groups that follow
// leader quiesced now.
func (q *Quiescer) followerMarks(leader raft.ServerAddress) []quiesceEvent {
	var evs []quiesceEvent
	for _, g := range q.registered() {
		g.mu.Lock()
		if g.quiesced && g.leader == leader {
			evs = append(evs, quiesceEvent{kind: kindFollower, group: g.name, term: g.term, index: g.index})
		}
		g.mu.Unlock()
	}
	return evs
}

func (q *Quiescer) registered() []*groupQuiesce {
	q.mu.RLock()
	defer q.mu.RUnlock()
	gs := make([]*groupQuiesce, 0, len(q.groups))
	for _, g := range q.groups {
		gs = append(gs, g)
	}
	return gs
}

func (q *Quiescer) accept() {
	defer q.wg.Done()
	for {
		c, err := q.layer.Accept()
		if err != nil {
			return
		}
		q.wg.Add(1)
		go q.readLink(c)
	}
}

// readLink reads a peer's link until it ends or falls silent for Dead,
// then forgets what it told and wakes the groups quiesced under the peer.
func (q *Quiescer) readLink(c net.Conn) {
	defer q.wg.Done()
	defer c.Close()
	r := bufio.NewReaderSize(c, 4<<10)
	c.SetReadDeadline(time.Now().Add(q.dead))
	inc, addr, err := readHello(r)
	if err != nil {
		q.logger.Debug("quiescence link: bad hello", "error", err)
		return
	}
	p := &peerIn{conn: c, inc: inc, marks: map[string]followMark{}}
	q.hear(p, time.Now().UnixNano())
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	old := q.peers[addr]
	q.peers[addr] = p
	q.gone.Delete(addr)
	q.mu.Unlock()
	if old != nil {
		old.conn.Close()
		if old.inc != inc {
			q.peerGone(addr, "leader's node restarted")
		}
	}
	// Links come in pairs: the peer learns this node's liveness from the
	// link back.
	q.link(addr)
	err = q.readEvents(r, c, p)
	q.mu.Lock()
	current := q.peers[addr] == p
	if current {
		delete(q.peers, addr)
		q.departing[addr] = inc
	}
	closed := q.closed
	q.mu.Unlock()
	if current && !closed {
		q.logger.Warn("quiescence link from a peer ended: its groups elect unless it links again", "peer", addr, "error", err)
		q.wg.Add(1)
		go q.failover(addr, inc)
	}
}

// failover elects new leaders for the groups led from addr, whose link
// of incarnation inc ended, unless a link of that incarnation comes back
// within two ticks (the node lives; its link broke and was redialed).
func (q *Quiescer) failover(addr raft.ServerAddress, inc uint64) {
	defer q.wg.Done()
	if !q.waitRunning(2 * q.tick) {
		return
	}
	q.mu.Lock()
	if q.departing[addr] == inc {
		delete(q.departing, addr)
	}
	p := q.live(q.peers[addr])
	if p == nil {
		q.gone.Store(addr, struct{}{})
	}
	q.mu.Unlock()
	if p != nil && p.inc == inc {
		return
	}
	q.logger.Warn("a peer did not link again: taken for gone, its groups elect", "peer", addr)
	q.peerGone(addr, "leader's node unreachable")
}

// waitRunning waits until this node has run for d, its stalls left out
// (up to maxExcused Deads in all), and reports false if the quiescer
// closed first: a peer that relinks at once cannot be heard while this
// node is stalled.
func (q *Quiescer) waitRunning(d time.Duration) bool {
	start := time.Now().UnixNano()
	from := q.mux.stalls.stalled(start)
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-q.stop:
			return false
		case <-t.C:
		}
		done, left := q.mux.stalls.waited(start, from, time.Now().UnixNano(), d, maxExcused*q.dead)
		if done {
			return true
		}
		t.Reset(left)
	}
}

// errPeerGone is the answer to a request (a vote, an append) for a peer
// whose link ended and did not come back.
var errPeerGone = errors.New("replication: the peer's node is gone (its link ended)")

// noteCampaign is told each vote request a replica here receives from a
// candidate at addr that campaigns as on a leadership transfer.
func (q *Quiescer) noteCampaign(addr raft.ServerAddress) {
	now := time.Now().UnixNano()
	if v, ok := q.campaigned.Load(addr); ok {
		v.(*atomic.Int64).Store(now)
		return
	}
	v := new(atomic.Int64)
	v.Store(now)
	if old, loaded := q.campaigned.LoadOrStore(addr, v); loaded {
		old.(*atomic.Int64).Store(now)
	}
}

// campaignedLately reports whether a candidate at addr asked a replica
// here for its vote as a takeover's within d: its node is working
// through the groups whose turn it holds.
func (q *Quiescer) campaignedLately(addr raft.ServerAddress, d time.Duration) bool {
	v, ok := q.campaigned.Load(addr)
	return ok && time.Since(time.Unix(0, v.(*atomic.Int64).Load())) < d
}

// heard is told the sender of each request a replica here receives: a
// peer taken for gone (its link ended and did not come back) is alive
// after all when a request comes from it. A survivor of a node's death,
// electing thousands of groups, once stalled for seconds, the other
// took it for gone, and refused its own candidates' votes to it until
// its link came back, which took minutes under that load; the
// survivor's appends and votes kept arriving all along.
func (q *Quiescer) heard(addr raft.ServerAddress) {
	if _, gone := q.gone.LoadAndDelete(addr); gone {
		q.logger.Warn("a peer taken for gone sent a request: it is alive", "peer", addr)
	}
}

// isGone reports whether the link from addr ended and did not come back.
func (q *Quiescer) isGone(addr raft.ServerAddress) bool {
	_, gone := q.gone.Load(addr)
	return gone
}

// holdsFor reports whether a link from addr of incarnation inc is
// alive, or ended so recently that failover still waits on it.
func (q *Quiescer) holdsFor(addr raft.ServerAddress, inc uint64) bool {
	q.mu.RLock()
	p, dep := q.peers[addr], q.departing[addr]
	q.mu.RUnlock()
	if p = q.live(p); p != nil {
		return p.inc == inc
	}
	return dep == inc
}

func readHello(r *bufio.Reader) (uint64, raft.ServerAddress, error) {
	var inc [8]byte
	if _, err := io.ReadFull(r, inc[:]); err != nil {
		return 0, "", err
	}
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return 0, "", err
	}
	if n == 0 || n > 1024 {
		return 0, "", fmt.Errorf("address of %d bytes", n)
	}
	addr := make([]byte, n)
	if _, err := io.ReadFull(r, addr); err != nil {
		return 0, "", err
	}
	return binary.BigEndian.Uint64(inc[:]), raft.ServerAddress(addr), nil
}

func (q *Quiescer) readEvents(r *bufio.Reader, c net.Conn, p *peerIn) error {
	for {
		now := time.Now()
		silent, left := q.silentFor(p, now.UnixNano())
		if silent {
			return fmt.Errorf("quiescence link silent for %v of this node's running time", q.dead)
		}
		c.SetReadDeadline(now.Add(left))
		kind, err := r.ReadByte()
		if err != nil {
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				continue // silent for Dead only if this node did not stall meanwhile
			}
			return err
		}
		q.hear(p, time.Now().UnixNano())
		if kind == kindTick {
			continue
		}
		if kind > kindLeaderWake {
			return fmt.Errorf("quiescence link: unknown message kind %d", kind)
		}
		n, err := binary.ReadUvarint(r)
		if err != nil {
			return err
		}
		if n > maxGroupName {
			return fmt.Errorf("quiescence link: group name of %d bytes", n)
		}
		name := make([]byte, n)
		if _, err := io.ReadFull(r, name); err != nil {
			return err
		}
		group := string(name)
		switch kind {
		case kindFollower:
			term, err := binary.ReadUvarint(r)
			if err != nil {
				return err
			}
			index, err := binary.ReadUvarint(r)
			if err != nil {
				return err
			}
			p.mu.Lock()
			p.marks[group] = followMark{term, index}
			p.mu.Unlock()
		case kindWoke:
			p.mu.Lock()
			delete(p.marks, group)
			p.mu.Unlock()
		case kindLeaderWake:
			q.mu.Lock()
			g := q.groups[group]
			q.mu.Unlock()
			if g != nil {
				g.leaderWake(p, "the leader stopped leading")
			}
		}
	}
}

// peerGone elects new leaders for the groups led from the node at addr,
// quiesced or not.
func (q *Quiescer) peerGone(addr raft.ServerAddress, why string) {
	for _, g := range q.registered() {
		if g.ledFrom(addr) {
			// Each in its own goroutine: leaderGone asks Raft for the
			// group's configuration.
			go g.leaderGone(addr, why)
		}
	}
}

// peer is the live link from addr, or nil.
func (q *Quiescer) peer(addr raft.ServerAddress) *peerIn {
	q.mu.RLock()
	p := q.peers[addr]
	q.mu.RUnlock()
	return q.live(p)
}

// peerOf is peer for an address a request carried, without converting
// it to a string.
func (q *Quiescer) peerOf(addr []byte) *peerIn {
	q.mu.RLock()
	p := q.peers[raft.ServerAddress(addr)]
	q.mu.RUnlock()
	return q.live(p)
}

func (q *Quiescer) live(p *peerIn) *peerIn {
	if p == nil {
		return nil
	}
	if silent, _ := q.silentFor(p, time.Now().UnixNano()); silent {
		return nil
	}
	return p
}

// register makes a replica's group take part.
func (q *Quiescer) register(name string, self raft.ServerID, awake raft.ReloadableConfig, lease time.Duration, logger hclog.Logger) (*groupQuiesce, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, errors.New("replication: quiescer closed")
	}
	if q.groups[name] != nil {
		return nil, fmt.Errorf("replication: group %q already takes part in quiescence", name)
	}
	g := &groupQuiesce{q: q, name: name, self: self, awake: awake, lease: lease, logger: logger, lastEntries: time.Now(), leaderSeen: make(chan struct{}, 1)}
	q.groups[name] = g
	return g, nil
}

// groupQuiesce is one replica's part in quiescence.
type groupQuiesce struct {
	q      *Quiescer
	name   string
	self   raft.ServerID
	awake  raft.ReloadableConfig
	lease  time.Duration // the group's LeaderLeaseTimeout
	logger hclog.Logger
	raft   atomic.Pointer[raft.Raft]

	mu          sync.Mutex
	closed      bool
	quiesced    bool
	leader      raft.ServerAddress // quiesced under
	leaderInc   uint64             // the incarnation of its node's link
	term, index uint64
	lastEntries time.Time

	// As a leader: the followers' requests of lterm, true for those
	// answered here last; while every one was (leaderQuiet), the leader's
	// own heartbeats, answered here too, go out seldom.
	lterm       uint64
	targets     map[raft.ServerAddress]bool
	leaderQuiet bool

	// The leader this replica last heard from as a follower (a request
	// of the replica's own term), when, in which term, and the
	// incarnation of the link from its node then; steppedTerm is the term
	// it heard of last when that node said the group's leader stepped
	// down. See holdsElection.
	heardFrom   raft.ServerAddress
	heardAt     time.Time
	heardTerm   uint64
	heardInc    uint64
	steppedTerm uint64

	// After the leader's node went (leaderGone): until yieldUntil the
	// replica holds its own campaigns, another voter's turn to take
	// over; takeover makes this one campaign at once.
	yieldUntil  time.Time
	failingOver bool                                  // leaderGone runs
	suspended   bool                                  // leaderGone raised this awake follower's timeouts
	takeover    func(leader raft.ServerAddress) error // set before Raft starts; tests replace it under mu
	// pass asks the voter id at addr to campaign at once (passTurn); set
	// before Raft starts.
	pass func(id raft.ServerID, addr raft.ServerAddress) error
	// votedFor is the candidate the replica voted for in its current
	// term, "" if none.
	votedFor  func() raft.ServerAddress
	takeovers atomic.Uint64
	passes    atomic.Uint64 // turns passed on (passTurn)
	// leaderSeen is signalled, while awaitLeader waits (awaiting), when
	// the replica hears from a leader of its term or becomes one: a
	// takeover waiting for the group's new leader learns of it at once,
	// and frees its campaign slot for the next. A follower's every
	// append asks awaiting, not the channel.
	leaderSeen chan struct{}
	awaiting   atomic.Bool

	answered atomic.Uint64 // requests answered on a follower's behalf
	servedN  atomic.Uint64 // requests this replica answered as a follower
	beatsN   atomic.Uint64 // of which heartbeats

	beatsAnswered atomic.Uint64 // heartbeats to awake followers answered here (answerHeartbeat)
}

// served is told, by the follower's append stream, each request the
// replica answered and its answer: it quiesces the replica or wakes it.
func (g *groupQuiesce) served(leaderAddr []byte, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, heartbeat bool) {
	g.servedN.Add(1)
	if heartbeat {
		g.beatsN.Add(1)
	}
	if resp == nil {
		return
	}
	now := time.Now()
	if resp.Term == req.Term && len(leaderAddr) > 0 {
		g.heard(leaderAddr, req.Term, now)
		g.sawLeader()
	}
	if heartbeat {
		return
	}
	caughtUp := len(req.Entries) == 0 && resp.Success && resp.Term == req.Term &&
		req.LeaderCommitIndex == req.PrevLogEntry && resp.LastLog == req.PrevLogEntry
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	if len(req.Entries) > 0 {
		g.lastEntries = now
	}
	if g.quiesced {
		switch {
		case caughtUp && string(g.leader) == string(leaderAddr) && g.term == req.Term:
			if g.index != req.PrevLogEntry {
				g.index = req.PrevLogEntry
				g.q.sendTo(g.leader, quiesceEvent{kind: kindFollower, group: g.name, term: g.term, index: g.index})
			}
		default:
			g.wakeLocked("the leader sent something new")
		}
		return
	}
	if !caughtUp || now.Sub(g.lastEntries) < quiesceIdle {
		return
	}
	leader := raft.ServerAddress(leaderAddr)
	p := g.q.peer(leader)
	if p == nil {
		// Not without the link from the leader's node, which tells when
		// it dies; asking for this node's link makes it dial back.
		g.q.link(leader)
		return
	}
	rf := g.raft.Load()
	if rf == nil || rf.State() != raft.Follower {
		return
	}
	if addr, _ := rf.LeaderWithID(); addr != leader {
		return
	}
	if err := rf.ReloadConfig(g.reloadable(quiescedTimeout)); err != nil {
		g.logger.Warn("quiescing failed", "error", err)
		return
	}
	if rf.State() != raft.Follower {
		// It changed meanwhile: its observer may have come before the
		// timeouts were raised.
		rf.ReloadConfig(g.awake)
		return
	}
	g.quiesced, g.leader, g.leaderInc, g.term, g.index = true, leader, p.inc, req.Term, req.PrevLogEntry
	g.suspended = false // quiesced supersedes it
	g.q.sendTo(leader, quiesceEvent{kind: kindFollower, group: g.name, term: g.term, index: g.index})
}

// electionHold bounds how long after it last heard from its leader a
// replica holds elections while the leader's node lives.
const electionHold = 10 * time.Second

// heard notes a request of the current term from the leader at addr.
func (g *groupQuiesce) heard(addr []byte, term uint64, now time.Time) {
	var inc uint64
	if p := g.q.peerOf(addr); p != nil {
		inc = p.inc
	} else {
		g.q.link(raft.ServerAddress(addr)) // the leader's node dials back
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if term <= g.steppedTerm {
		return // sent before its node told that it stepped down
	}
	if string(g.heardFrom) != string(addr) {
		g.heardFrom = raft.ServerAddress(addr)
	}
	g.heardAt, g.heardTerm, g.heardInc = now, term, inc
}

// holdsElection reports whether the replica must neither campaign nor
// grant a pre-vote to candidate (nil: when it would campaign itself):
// it heard from its leader within electionHold, the leader is not the
// candidate, and the link from the leader's node, of the same
// incarnation, is alive. A follower that misses its leader's heartbeats
// while the leader's node is alive is starved of CPU, as are the others
// most likely, or its leader is: an election would not find a better
// leader, and on a node holding thousands of groups it would set off
// thousands. The hold ends when the link falls silent for Dead or ends
// (the node died, paused or was cut off), when the node tells that the
// leader stepped down, or after electionHold.
func (g *groupQuiesce) holdsElection(candidate []byte) bool {
	g.mu.Lock()
	leader, at, inc, yield := g.heardFrom, g.heardAt, g.heardInc, g.yieldUntil
	g.mu.Unlock()
	if candidate == nil && time.Now().Before(yield) {
		return true // another voter takes over from a dead leader (leaderGone)
	}
	if leader == "" || inc == 0 || string(leader) == string(candidate) || time.Since(at) > electionHold {
		return false
	}
	return g.q.holdsFor(leader, inc)
}

// forgetLeaderLocked ends the hold on elections: the leader heard of
// stepped down.
func (g *groupQuiesce) forgetLeaderLocked() {
	g.steppedTerm = max(g.steppedTerm, g.heardTerm)
	g.heardFrom, g.heardInc = "", 0
}

// wakeLocked sets the replica's timeouts back as configured.
func (g *groupQuiesce) wakeLocked(why string) {
	if !g.quiesced {
		return
	}
	g.quiesced = false
	g.q.sendTo(g.leader, quiesceEvent{kind: kindWoke, group: g.name})
	g.logger.Debug("waking", "reason", why)
	if rf := g.raft.Load(); rf != nil {
		if err := rf.ReloadConfig(g.awake); err != nil {
			g.logger.Warn("waking failed", "error", err)
		}
	}
}

// wake wakes the replica now.
func (g *groupQuiesce) wake(why string) {
	g.mu.Lock()
	g.wakeLocked(why)
	g.resumeLocked()
	g.mu.Unlock()
}

// resumeLocked sets back the timeouts leaderGone raised on an awake
// follower.
func (g *groupQuiesce) resumeLocked() {
	if !g.suspended {
		return
	}
	g.suspended = false
	if rf := g.raft.Load(); rf != nil {
		if err := rf.ReloadConfig(g.awake); err != nil {
			g.logger.Warn("setting the timeouts back failed", "error", err)
		}
	}
}

// leaderWake is a kindLeaderWake from the link p.
func (g *groupQuiesce) leaderWake(p *peerIn, why string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.heardInc == p.inc {
		g.forgetLeaderLocked()
	}
	if g.quiesced && g.leaderInc == p.inc {
		g.wakeLocked(why)
	}
}

// ledFrom reports whether the replica follows a leader at addr: quiesced
// under it, told so by Raft, or last heard from it.
func (g *groupQuiesce) ledFrom(addr raft.ServerAddress) bool {
	g.mu.Lock()
	under := (g.quiesced && g.leader == addr) || g.heardFrom == addr
	g.mu.Unlock()
	if under {
		return true
	}
	rf := g.raft.Load()
	if rf == nil {
		return false
	}
	a, _ := rf.LeaderWithID()
	return a == addr
}

// A dead leader's group elects in turns: the voters left, in an order
// drawn from the group's name (the same on every node), each in its turn
// campaigns at once while the later ones hold their own campaigns. A
// voter whose turn it is keeps it while it waits for a campaign slot
// (takeoverCampaigns): a node that must elect thousands of groups works
// through them at its own pace, and the later voters, which see its
// campaigns arrive, wait for it rather than campaign against it. A turn
// passes on when its voter's campaign fails (it asks the next voter to
// campaign at once, as a leadership transfer does), when its node goes,
// or when, after takeoverTurn, no campaign has come from its node for
// takeoverQuiet (it is not working through its groups: an earlier
// version, a starved node). After takeoverMax Raft's own timeouts go on.
// A turn outlasts a vote's round trip on a node electing a thousand
// groups at once, each vote two or three fsyncs on either side: with
// 1.5 s, the next voter's turn often came while its vote for the first
// was still on its way, and the two split the votes.
const (
	takeoverTurn  = 3 * time.Second
	takeoverQuiet = 3 * time.Second
	takeoverMax   = 30 * time.Second
)

// takeoverCampaigns bounds the campaigns a node's takeovers run at once,
// each until its group has a leader or for takeoverCampaign: a node that
// led a thousand groups died, and the thousand elections at once (their
// fsyncs, their votes, their logs) starved both nodes left for seconds,
// long enough for each to take the other for dead. Much of that
// starvation was yamux's spinning readers (see streamSet); without it,
// 128 at once elected a 10,000-partition node's 3,340 groups in 4.3 and
// 4.9 s where 64 took 5.1 and 5.5 s.
const (
	takeoverCampaigns = 128
	takeoverCampaign  = 2 * time.Second
)

// leaderGone elects a new leader after the node of the replica's leader
// went: the voters left on nodes not known dead take turns (above) to
// campaign at once, as on a leadership transfer (no pre-vote; the others
// grant their votes though they knew a leader), while the others hold
// their own campaigns. So a node's death elects every group it led in
// one round trip each, without a candidate opposing another; a campaign
// that fails (a vote refused, a log behind the other's) hands the turn
// to the next voter rather than to the election timeout; and the
// groups' leadership spreads over the nodes left.
func (g *groupQuiesce) leaderGone(leader raft.ServerAddress, why string) {
	rf := g.raft.Load()
	if rf == nil || (rf.State() != raft.Follower && rf.State() != raft.Candidate) {
		return
	}
	f := rf.GetConfiguration()
	if f.Error() != nil {
		return
	}
	var order []raft.Server
	voter := false
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter || s.Address == leader || (s.ID != g.self && g.q.isGone(s.Address)) {
			continue
		}
		voter = voter || s.ID == g.self
		order = append(order, s)
	}
	sort.Slice(order, func(i, j int) bool { return takeoverRank(g.name, order[i].ID) < takeoverRank(g.name, order[j].ID) })
	// A follower keeps its own timeouts out of reach until its turn or
	// the end (a quiesced one by staying quiesced, an awake one by
	// raising them below): woken, it would campaign on them at once (it
	// heard nothing for long), and raft forgets a TimeoutNow that finds
	// it campaigning already (the next round, an election timeout
	// later, starts with a pre-vote again). wake ends both; yieldUntil
	// holds the pre-votes of a replica that was campaigning already.
	wake := func() {
		g.mu.Lock()
		if g.quiesced && g.leader == leader {
			g.wakeLocked(why)
		}
		g.resumeLocked()
		g.mu.Unlock()
	}
	g.mu.Lock()
	if g.heardFrom == leader {
		g.forgetLeaderLocked()
	}
	if g.failingOver {
		g.mu.Unlock()
		return
	}
	if !voter {
		g.mu.Unlock()
		wake()
		return
	}
	g.failingOver = true
	if !g.quiesced && rf.State() == raft.Follower {
		if err := rf.ReloadConfig(g.reloadable(quiescedTimeout)); err == nil {
			g.suspended = true
		}
	}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.failingOver, g.yieldUntil = false, time.Time{}
		g.mu.Unlock()
		wake()
	}()
	g.takeTurns(rf, leader, order, g.q.isGone(leader))
}

// takeTurns walks order (the group's voters left, ranked) until the
// group has a leader: this replica campaigns in its turn, holds its own
// campaigns in the others' (see takeoverTurn). When the leader's node
// was taken for gone (gone) and is heard from again before this
// replica's campaign, it lives after all: its groups keep their leader.
func (g *groupQuiesce) takeTurns(rf *raft.Raft, leader raft.ServerAddress, order []raft.Server, gone bool) {
	revived := func() bool { return gone && !g.q.isGone(leader) }
	deadline := time.Now().Add(takeoverMax)
	startTerm := rf.CurrentTerm()
	tick := time.NewTicker(g.q.tick)
	defer tick.Stop()
	for pos := 0; pos < len(order); pos++ {
		cur := order[pos]
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			return
		}
		g.yieldUntil = time.Time{}
		takeover := g.takeover
		g.mu.Unlock()
		if cur.ID == g.self {
			if takeover != nil && g.takeTurn(rf, leader, takeover, pos, deadline, revived) {
				return
			}
			g.passTurn(rf, leader, order[pos+1:])
			return
		}
		// Another voter's turn.
		turnStart := time.Now()
		for {
			if hasLeader(rf, leader) || revived() {
				return
			}
			if rf.State() == raft.Candidate && rf.CurrentTerm() > startTerm {
				// Asked to campaign (the voter in turn passed it on):
				// this replica's campaign is under way.
				if g.awaitLeader(rf, leader, takeoverCampaign) {
					return
				}
				if i := slices.IndexFunc(order, func(s raft.Server) bool { return s.ID == g.self }); i >= 0 {
					g.passTurn(rf, leader, order[i+1:])
				}
				return
			}
			now := time.Now()
			if now.After(deadline) {
				return
			}
			if g.q.isGone(cur.Address) || (now.Sub(turnStart) >= takeoverTurn && !g.q.campaignedLately(cur.Address, takeoverQuiet)) {
				break // the next voter's turn
			}
			g.mu.Lock()
			g.yieldUntil = now.Add(2 * g.q.tick)
			g.mu.Unlock()
			select {
			case <-g.q.stop:
				return
			case <-tick.C:
			}
		}
	}
}

// hasLeader reports whether the group has a leader other than the dead
// one: this replica or one it heard from.
func hasLeader(rf *raft.Raft, dead raft.ServerAddress) bool {
	a, _ := rf.LeaderWithID()
	return rf.State() == raft.Leader || (a != "" && a != dead)
}

// sawLeader tells awaitLeader that the group may have a leader now.
func (g *groupQuiesce) sawLeader() {
	if !g.awaiting.Load() {
		return
	}
	select {
	case g.leaderSeen <- struct{}{}:
	default:
	}
}

// awaitLeader waits up to d for the group to have a leader, told by
// sawLeader, and looks every 50 ms besides.
func (g *groupQuiesce) awaitLeader(rf *raft.Raft, dead raft.ServerAddress, d time.Duration) bool {
	g.awaiting.Store(true)
	defer g.awaiting.Store(false)
	tick := time.NewTicker(min(d/20, 50*time.Millisecond))
	defer tick.Stop()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		if hasLeader(rf, dead) {
			return true
		}
		select {
		case <-g.q.stop:
			return true
		case <-g.leaderSeen:
		case <-tick.C:
		}
	}
	return hasLeader(rf, dead)
}

// passTurn asks the first of next, the voters after this one, to
// campaign at once (a TimeoutNow, as a leadership transfer sends), after
// this replica's turn ended without a leader, and waits a turn for one.
// A voter that cannot campaign (gated) refuses: the one after it is
// asked.
func (g *groupQuiesce) passTurn(rf *raft.Raft, leader raft.ServerAddress, next []raft.Server) {
	g.mu.Lock()
	pass := g.pass
	g.mu.Unlock()
	for _, s := range next {
		if pass == nil || hasLeader(rf, leader) {
			return
		}
		if err := pass(s.ID, s.Address); err != nil {
			g.logger.Debug("the leader's node is gone: passing the turn failed", "to", s.ID, "error", err)
			continue
		}
		g.passes.Add(1)
		g.logger.Info("the leader's node is gone: the turn passed on", "to", s.ID)
		g.awaitLeader(rf, leader, takeoverTurn)
		return
	}
}

// takeTurn is the replica's turn to take over from the dead leader: it
// campaigns at once unless there is no need; true when a leader is known.
// It waits for a campaign slot up to deadline.
func (g *groupQuiesce) takeTurn(rf *raft.Raft, leader raft.ServerAddress, takeover func(raft.ServerAddress) error, turn int, deadline time.Time, revived func() bool) bool {
	wait := time.NewTimer(time.Until(deadline))
	defer wait.Stop()
	select {
	case g.q.campaigns <- struct{}{}:
	case <-wait.C:
		return false
	case <-g.q.stop:
		return true
	}
	defer func() { <-g.q.campaigns }()
	if hasLeader(rf, leader) || revived() {
		return true // it heard of a new leader meanwhile, or from the old one's node
	}
	if g.votedFor != nil {
		if c := g.votedFor(); c != "" && c != leader && c != g.q.mux.Addr() {
			// A candidate has this replica's vote in its term: it leads
			// or soon will (its first append may be on its way yet); a
			// campaign now would depose it.
			g.logger.Debug("the leader's node is gone: voted for another candidate, not campaigning", "candidate", c, "turn", turn)
			return g.awaitLeader(rf, leader, takeoverCampaign)
		}
	}
	// A replica campaigning already (its own timeout ran out first) would
	// forget the TimeoutNow: its next round's pre-vote, which the others
	// grant, stands in for it.
	if rf.State() != raft.Follower {
		return g.awaitLeader(rf, leader, takeoverCampaign)
	}
	g.logger.Info("the leader's node is gone: campaigning at once", "leader", leader, "turn", turn)
	if err := takeover(leader); err != nil {
		g.logger.Warn("campaigning after the leader's node went failed", "error", err)
		return false
	}
	g.takeovers.Add(1)
	// The slot is held while the campaign runs.
	return g.awaitLeader(rf, leader, takeoverCampaign)
}

// takeoverRank orders a group's voters for leaderGone.
func takeoverRank(group string, id raft.ServerID) uint64 {
	h := fnv.New64a()
	h.Write([]byte(group))
	h.Write([]byte(id))
	return h.Sum64()
}

// leaderHeard is when the link from the leader's node last spoke, while
// the replica follows quiesced (zero otherwise).
func (g *groupQuiesce) leaderHeard() time.Time {
	g.mu.Lock()
	quiesced, leader, inc := g.quiesced, g.leader, g.leaderInc
	g.mu.Unlock()
	if !quiesced {
		return time.Time{}
	}
	p := g.q.peer(leader)
	if p == nil || p.inc != inc {
		return time.Time{}
	}
	return time.Unix(0, p.heard.Load())
}

// stateChanged is told each Raft state the replica enters.
func (g *groupQuiesce) stateChanged(from, to raft.RaftState) {
	if to != raft.Follower {
		g.wake("raft state " + to.String())
	}
	if to == raft.Leader {
		g.mu.Lock()
		g.forgetLeaderLocked()
		g.mu.Unlock()
		g.sawLeader()
	}
	if from == raft.Leader && to != raft.Leader {
		g.mu.Lock()
		if rf := g.raft.Load(); rf != nil {
			g.wakeLeaderLocked(rf)
		}
		g.targets = nil
		g.mu.Unlock()
		g.q.sendAll(quiesceEvent{kind: kindLeaderWake, group: g.name})
	}
}

// mayAnswer reports whether the leader's transport may answer req to the
// follower at target on its behalf, and fills resp if so.
func (g *groupQuiesce) mayAnswer(id raft.ServerID, target raft.ServerAddress, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) bool {
	ok := g.answerable(id, target, req, resp)
	g.noteLeading(req.Term, target, ok)
	return ok
}

// answerHeartbeat reports whether the leader's transport may answer a
// heartbeat to the follower at target itself, and fills resp if so: while
// the link from the follower's node is alive. The heartbeat still goes to
// the follower, behind (appendTransport.heartbeatBehind), which keeps its
// timer; what the answer here keeps is the leader's lease, which
// hashicorp/raft's leader otherwise loses when a follower answers nothing
// for a LeaderLeaseTimeout. On a node of thousands of groups starved of
// CPU for a second that was every leader stepping down at once, an
// election for each. A heartbeat moves no match index, so the answer
// cannot acknowledge anything; a follower that moved to a later term
// tells the leader with its answer to the next append, which goes to it.
func (g *groupQuiesce) answerHeartbeat(id raft.ServerID, target raft.ServerAddress, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) bool {
	if !isHeartbeat(req) {
		return false
	}
	if g.q.peer(target) == nil {
		g.q.link(target) // the follower's node dials back
		return false
	}
	answerFor(id, target, req, 0, resp)
	g.beatsAnswered.Add(1)
	return true
}

// isHeartbeat reports whether req is a hashicorp/raft heartbeat: a
// request of a term that carries no entries, no previous entry and no
// commit index.
func isHeartbeat(req *raft.AppendEntriesRequest) bool {
	return req.Term != 0 && len(req.Entries) == 0 && req.PrevLogEntry == 0 && req.PrevLogTerm == 0 && req.LeaderCommitIndex == 0
}

// answerFor fills resp with the success the follower at target would
// answer req with, its last entry at lastLog.
func answerFor(id raft.ServerID, target raft.ServerAddress, req *raft.AppendEntriesRequest, lastLog uint64, resp *raft.AppendEntriesResponse) {
	*resp = raft.AppendEntriesResponse{
		RPCHeader: raft.RPCHeader{ProtocolVersion: req.ProtocolVersion, ID: []byte(id), Addr: []byte(target)},
		Term:      req.Term, LastLog: lastLog, Success: true,
	}
}

// noteLeading keeps the leader's own timeouts: raised while every
// follower is answered for here or on a node taken for gone, as
// configured otherwise. raft backs off its requests to a gone node by
// itself; a leader such a follower kept awake heartbeat its live
// followers two and a half times as often, which after a node's death was
// most of the survivors' CPU (every group that had a replica there).
func (g *groupQuiesce) noteLeading(term uint64, target raft.ServerAddress, answered bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	rf := g.raft.Load()
	if rf == nil {
		return
	}
	if g.lterm != term || g.targets == nil {
		g.lterm, g.targets = term, map[raft.ServerAddress]bool{}
		g.wakeLeaderLocked(rf) // quiet in an earlier term: it starts this one awake
	}
	g.targets[target] = answered
	if answered == g.leaderQuiet {
		return // the hot path: an awake leader's appends
	}
	if !answered {
		if !g.q.isGone(target) {
			g.wakeLeaderLocked(rf)
		}
		return
	}
	for t, a := range g.targets {
		if !a && !g.q.isGone(t) {
			return
		}
	}
	if rf.State() != raft.Leader {
		return
	}
	if err := rf.ReloadConfig(g.reloadable(time.Duration(quietLeaderLeases * float64(g.lease)))); err != nil {
		g.logger.Warn("quieting the leader failed", "error", err)
		return
	}
	g.leaderQuiet = true
}

// wakeLeaderLocked sets a quiet leader's timeouts back as configured.
func (g *groupQuiesce) wakeLeaderLocked(rf *raft.Raft) {
	if !g.leaderQuiet {
		return
	}
	g.leaderQuiet = false
	if err := rf.ReloadConfig(g.awake); err != nil {
		g.logger.Warn("waking the leader failed", "error", err)
	}
}

// reloadable is the awake configuration with both timeouts at d.
func (g *groupQuiesce) reloadable(d time.Duration) raft.ReloadableConfig {
	rc := g.awake
	rc.HeartbeatTimeout, rc.ElectionTimeout = d, d
	return rc
}

func (g *groupQuiesce) answerable(id raft.ServerID, target raft.ServerAddress, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) bool {
	if len(req.Entries) > 0 {
		return false
	}
	p := g.q.peer(target)
	if p == nil {
		return false
	}
	p.mu.Lock()
	m, ok := p.marks[g.name]
	p.mu.Unlock()
	if !ok || m.term != req.Term {
		return false
	}
	if !isHeartbeat(req) && (req.PrevLogEntry != m.index || req.LeaderCommitIndex != m.index) {
		return false
	}
	answerFor(id, target, req, m.index, resp)
	g.answered.Add(1)
	return true
}

// close leaves quiescence: the replica is closing.
func (g *groupQuiesce) close(leading bool) {
	g.mu.Lock()
	if g.quiesced {
		g.q.sendTo(g.leader, quiesceEvent{kind: kindWoke, group: g.name})
	}
	g.closed, g.quiesced = true, false
	g.mu.Unlock()
	if leading {
		g.q.sendAll(quiesceEvent{kind: kindLeaderWake, group: g.name})
	}
	g.q.mu.Lock()
	if g.q.groups[g.name] == g {
		delete(g.q.groups, g.name)
	}
	g.q.mu.Unlock()
}
