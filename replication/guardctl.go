package replication

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The control channel of a group: a second stream layer on the mux
// (group name + "#ctl") carrying the vote guard's requests, one JSON line
// each way per stream.
//
//	rejoin  a gated replica asks the leader to commit its rejoin marker
//	status  gated or not, last log index and term (to find the most
//	        complete log when every voter is gated)
type ctlRequest struct {
	Op     string `json:"op"`
	Server string `json:"server,omitempty"`
	Nonce  uint64 `json:"nonce,omitempty"`
}

type ctlResponse struct {
	Err       string `json:"err,omitempty"`
	Server    string `json:"server,omitempty"`
	Gated     bool   `json:"gated"`
	Recovered bool   `json:"recovered"` // released as the most complete log of an all-gated group`
	HasLeader bool   `json:"has_leader"`
	LastIndex uint64 `json:"last_index"`
	LastTerm  uint64 `json:"last_term"`
	EndOffset int64  `json:"end_offset"`
}

const ctlTimeout = 5 * time.Second

type ctlServer struct {
	r     *Replica
	layer *groupLayer

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func ctlGroup(group string) string { return group + "#ctl" }

func newCtlServer(r *Replica) (*ctlServer, error) {
	layer, err := r.cfg.Mux.layer(ctlGroup(r.cfg.Group), false, false)
	if err != nil {
		return nil, err
	}
	s := &ctlServer{r: r, layer: layer}
	layer.Serve(s.serve)
	return s, nil
}

// serve answers the one request of the stream c.
func (s *ctlServer) serve(c net.Conn) {
	defer c.Close()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	c.SetDeadline(time.Now().Add(applyTimeout + ctlTimeout))
	var req ctlRequest
	if err := json.NewDecoder(bufio.NewReader(c)).Decode(&req); err != nil {
		return
	}
	resp := s.r.handleCtl(req)
	json.NewEncoder(c).Encode(resp)
}

func (s *ctlServer) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.layer.Close()
	s.wg.Wait()
}

func (r *Replica) handleCtl(req ctlRequest) ctlResponse {
	switch req.Op {
	case "status":
		return r.status()
	case "rejoin":
		if r.raft.State() != raft.Leader {
			return ctlResponse{Err: r.notLeader().Error()}
		}
		b := encodeMarker(marker{server: req.Server, nonce: req.Nonce}, time.Now())
		if err := r.raft.Apply(b, applyTimeout).Error(); err != nil {
			return ctlResponse{Err: err.Error()}
		}
		r.logger.Info("vote guard: committed rejoin marker", "for", req.Server)
		return ctlResponse{}
	}
	return ctlResponse{Err: fmt.Sprintf("unknown op %q", req.Op)}
}

func (r *Replica) status() ctlResponse {
	last, _ := r.store.LastIndex()
	var term uint64
	if last > 0 {
		var e raft.Log
		if r.store.GetLog(last, &e) == nil {
			term = e.Term
		}
	} else if metas, err := r.snaps.list(); err == nil && len(metas) > 0 {
		last, term = metas[0].Index, metas[0].Term
	}
	_, lid := r.raft.LeaderWithID()
	return ctlResponse{Server: string(r.serverID), Gated: r.Gated(), Recovered: r.recovered.Load(), HasLeader: lid != "", LastIndex: last, LastTerm: term, EndOffset: r.log.EndOffset()}
}

// callCtl sends one request to the replica of this group at addr.
func (r *Replica) callCtl(addr raft.ServerAddress, req ctlRequest) (ctlResponse, error) {
	c, err := r.cfg.Mux.Dial(ctlGroup(r.cfg.Group), addr, ctlTimeout)
	if err != nil {
		return ctlResponse{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(applyTimeout + ctlTimeout))
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return ctlResponse{}, err
	}
	var resp ctlResponse
	if err := json.NewDecoder(bufio.NewReader(c)).Decode(&resp); err != nil {
		return ctlResponse{}, err
	}
	if resp.Err != "" {
		return resp, errors.New(resp.Err)
	}
	return resp, nil
}

// Gated reports whether the vote guard holds this replica back.
func (r *Replica) Gated() bool { return r.guard.gated.Load() }

// GateReason says why the replica is gated ("" when it is not).
func (r *Replica) GateReason() string {
	r.gateMu.Lock()
	defer r.gateMu.Unlock()
	if !r.guard.gated.Load() {
		return ""
	}
	return r.gateWhy
}

func (r *Replica) setGated(on bool, why string) {
	r.gateMu.Lock()
	defer r.gateMu.Unlock()
	was := r.guard.gated.Load()
	r.guard.gated.Store(on)
	if on {
		r.gateSince, r.gateWhy = time.Now(), why
		if !was {
			r.logger.Warn("vote guard: gated", "reason", why)
		}
		return
	}
	r.guard.allowed.Store(nil)
	if was {
		if err := r.stable.SetUint64([]byte(keyGated), 0); err != nil {
			r.logger.Error("vote guard: record release", "error", err)
		}
		r.logger.Info("vote guard: released", "reason", why, "gated_for", time.Since(r.gateSince))
	}
}

// ForceUngate releases the guard by operator decision (--accept-data-loss):
// used when every voter lost power and some will not come back, so the
// most complete log among the reachable ones must lead. Writes acknowledged
// past this replica's log end may be lost; the log says how far it reaches.
func (r *Replica) ForceUngate(reason string) {
	r.logger.Error("vote guard: released by operator; acknowledged writes past this log may be lost",
		"reason", reason, "log_end", r.log.EndOffset(), "last_index", r.status().LastIndex)
	r.setGated(false, "operator: "+reason)
}

// onMarker is called by the FSM for every applied rejoin marker.
func (r *Replica) onMarker(m marker) {
	if m.server == string(r.serverID) && m.nonce == r.nonce && r.Gated() {
		r.setGated(false, "rejoin marker committed and applied: caught up")
	}
}

// rejoinLoop runs while gated: it asks the leader to commit a rejoin
// marker, and when there is no leader it checks whether every voter is
// gated, in which case the most complete log is let through.
func (r *Replica) rejoinLoop() {
	defer r.wg.Done()
	tick := r.cfg.Raft.withDefaults().HeartbeatTimeout / 2
	t := time.NewTicker(tick)
	defer t.Stop()
	var lastAsk time.Time
	leaderless := 0
	for r.Gated() {
		select {
		case <-r.closed:
			return
		case <-t.C:
		}
		addr, id := r.raft.LeaderWithID()
		if id != "" && id != r.serverID {
			leaderless = 0
			if time.Since(lastAsk) < 3*time.Second {
				continue
			}
			lastAsk = time.Now()
			if _, err := r.callCtl(addr, ctlRequest{Op: "rejoin", Server: string(r.serverID), Nonce: r.nonce}); err != nil {
				r.logger.Debug("vote guard: rejoin request failed", "leader", id, "error", err)
				lastAsk = time.Time{}
			}
			continue
		}
		// No leader: after a few rounds, see whether all voters are gated.
		leaderless++
		if leaderless < 4 {
			continue
		}
		r.checkAllGated()
	}
}

// checkAllGated asks every voter for its status; when all answer, none
// has a leader and the voters the guard does not hold back are no quorum
// (every voter gated, or all but a minority), the most complete log
// (highest last term, then index, then server id) may be elected: that
// replica releases itself if it is gated, and the gated others accept its
// votes only.
func (r *Replica) checkAllGated() {
	conf, err := r.Configuration()
	if err != nil {
		return
	}
	var sts []ctlResponse
	for _, s := range conf.Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		var st ctlResponse
		if s.ID == r.serverID {
			st = r.status()
		} else if st, err = r.callCtl(s.Address, ctlRequest{Op: "status"}); err != nil {
			return // not all reachable: wait (or an operator decides)
		}
		if st.HasLeader {
			return
		}
		sts = append(sts, st)
	}
	if len(sts) == 0 {
		return
	}
	// The voters that may vote as they like (never gated, or released as
	// an earlier recovery's most complete log): while they are a quorum
	// they elect a leader and the gated ones catch up from it. When they
	// are not (two of three lost power one after the other before the
	// first caught up), nothing can be elected: the most complete log of
	// all the voters must lead, as when every voter is gated.
	free := 0
	for _, st := range sts {
		if !st.Gated || st.Recovered {
			free++
		}
	}
	if free > len(sts)/2 {
		return
	}
	sort.Slice(sts, func(i, j int) bool {
		a, b := sts[i], sts[j]
		if a.LastTerm != b.LastTerm {
			return a.LastTerm > b.LastTerm
		}
		if a.LastIndex != b.LastIndex {
			return a.LastIndex > b.LastIndex
		}
		return a.Server < b.Server
	})
	best := sts[0]
	var maxEnd int64
	for _, s := range sts {
		maxEnd = max(maxEnd, s.EndOffset)
	}
	if best.Server == string(r.serverID) {
		r.logger.Error("vote guard: too few voters kept their logs to elect; electing the most complete log. Writes acknowledged past it may be lost",
			"last_index", best.LastIndex, "last_term", best.LastTerm, "log_end", best.EndOffset, "largest_log_end_seen", maxEnd)
		r.recovered.Store(true)
		r.setGated(false, "every voter gated: this replica holds the most complete log")
		return
	}
	id := raft.ServerID(best.Server)
	if a := r.guard.allowed.Load(); a == nil || *a != id {
		r.logger.Warn("vote guard: too few voters kept their logs to elect; will vote for the most complete log", "candidate", best.Server,
			"last_index", best.LastIndex, "last_term", best.LastTerm)
		r.guard.allowed.Store(&id)
	}
}

var _ net.Conn = (*bufferedConn)(nil)

// PeerLogEnd asks the replica of this group at addr for its log end offset
// (to tell when a new replica has caught up before it becomes a voter).
func (r *Replica) PeerLogEnd(addr raft.ServerAddress) (int64, error) {
	st, err := r.callCtl(addr, ctlRequest{Op: "status"})
	if err != nil {
		return -1, err
	}
	return st.EndOffset, nil
}
