package rpc

import (
	"context"
	"maps"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Offset retention.
//
// As in Kafka (offsets.retention.minutes, KIP-211), a committed offset is
// deleted once its group has had no members for
// GroupConfig.OffsetsRetention and the offset was not committed in that
// time either. A group with members keeps its offsets, however old,
// except that a Stable "consumer" group's offsets of topics none of its
// members subscribes to expire by their commit times alone. The
// node that coordinates groups looks every
// GroupConfig.OffsetsRetentionCheckInterval and deletes the expired
// offsets through GroupBroker.ExpireOffsets (replicated, as a commit is).
//
// Membership lives in the coordinator's memory, so when a group was left
// empty is known only for groups emptied on this node since it took the
// role. For the others (emptied before, on another node, or never with
// members: groups that only commit) the retention counts from the first
// check that found this node coordinating, or from when it last dropped
// its groups (the role moved away; its members may still be rejoining),
// whichever is later, and from each offset's commit time
// (CommittedOffset.CommitTime). A coordinator change therefore postpones
// an expiry, never hastens it. The deletion is conditional
// (GroupBroker.ExpireOffsets): an offset committed again between the
// check and the deletion is kept.

// retainOffsets checks for expired offsets every check interval until
// the server closes.
func (s *Server) retainOffsets() {
	defer s.wg.Done()
	t := time.NewTicker(s.groups.cfg.OffsetsRetentionCheckInterval)
	defer t.Stop()
	var since time.Time
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			since = s.expireOffsets(s.ctx, s.groups.clock.Now(), since)
		}
	}
}

// expireOffsets deletes the committed offsets expired at now, when this
// node coordinates groups. since is when it was first seen coordinating
// (zero: not so far); the returned since is for the next check.
func (s *Server) expireOffsets(ctx context.Context, now, since time.Time) time.Time {
	keep := s.groups.cfg.OffsetsRetention
	if keep < 0 {
		return since
	}
	if e := s.coordinating(); e != nil {
		if e == kerr.NotCoordinator {
			return time.Time{}
		}
		return since // the stored groups are not loaded yet
	}
	if since.IsZero() {
		return now // nothing is known of what came before
	}
	withOffsets := map[string]bool{}
	for _, name := range s.gb.OffsetGroups() {
		if ctx.Err() != nil {
			return since
		}
		withOffsets[name] = true
		v := s.groups.retentionOf(name)
		if !v.empty && v.subscribed == nil {
			continue
		}
		offs, err := s.gb.FetchOffsets(name, nil)
		if err != nil {
			s.logger.Warn("offset retention: fetch a group's offsets", "group", name, "error", err)
			continue
		}
		var expired []CommittedOffset
		for _, o := range offs {
			if !v.empty && v.subscribed[o.Topic] {
				continue
			}
			if now.Sub(later(later(since, v.from), o.CommitTime)) >= keep {
				expired = append(expired, o)
			}
		}
		if len(expired) == 0 {
			continue
		}
		if s.gb.Coordinator() != s.b.NodeID() {
			return time.Time{} // the role moved during the pass
		}
		if err := s.gb.ExpireOffsets(ctx, name, expired); err != nil {
			s.logger.Warn("offset retention: delete expired offsets", "group", name, "error", err)
			continue
		}
		s.logger.Info("deleted expired committed offsets", "group", name, "partitions", len(expired), "of", len(offs), "retention", keep)
	}
	s.groups.pruneEmptied(withOffsets)
	return since
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// groupRetention is what a group's state here says of its offsets' expiry.
type groupRetention struct {
	// empty: no members nor pending ones here.
	empty bool
	// from: the retention counts from no earlier than this: when every
	// group was dropped here last (members may still be rejoining), or
	// when this one was emptied here, whichever is later (zero: neither).
	from time.Time
	// subscribed: a Stable "consumer" group's members' topics (the
	// offsets of the others expire); nil for any other group with members
	// (its offsets stay).
	subscribed map[string]bool
}

// retentionOf tells how a group's offsets may expire here.
func (c *coordinator) retentionOf(name string) groupRetention {
	r := groupRetention{empty: true}
	if g, _ := c.lockGroup(name, false); g != nil {
		r.empty = len(g.members) == 0 && len(g.pending) == 0
		if !r.empty && g.state == groupStable && g.protocolType == "consumer" {
			if topics, ok := g.consumerTopics(); ok {
				r.subscribed = topics
			}
		}
		g.unlock()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r.from = later(c.emptied[name], c.resetAt)
	return r
}

// pruneEmptied forgets when the groups without committed offsets were
// emptied (nothing of theirs expires).
func (c *coordinator) pruneEmptied(withOffsets map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	maps.DeleteFunc(c.emptied, func(name string, _ time.Time) bool { return !withOffsets[name] })
}
