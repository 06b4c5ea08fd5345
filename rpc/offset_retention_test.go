package rpc

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlog/raftlog/log/testkit"
)

// TestOffsetRetention: a committed offset is deleted once its group has
// had no members, and the offset has not been committed, for the
// retention; a group with members keeps its offsets; the retention counts
// from when this node was first seen coordinating for groups not emptied
// here, and stops while another node coordinates.
func TestOffsetRetention(t *testing.T) {
	const day = 24 * time.Hour
	b := newMemBroker(t)
	s := NewServer(b, WithLogger(testkit.Logger(t, hclog.Off)), WithGroupConfig(GroupConfig{OffsetsRetention: day, MinSessionTimeout: 10 * time.Millisecond}))
	clk := &fakeClock{}
	s.groups.clock, b.clock = clk, clk
	// Groups held in memory only: a move drops them, as it does those
	// not stored yet (TestGroupResumesAfterCoordinatorMove: stored ones).
	s.groups.store = nil
	n := 0
	s.groups.newID = func(prefix string) string {
		n++
		return fmt.Sprintf("%s-%d", prefix, n)
	}
	h := &gtest{t: t, c: s.groups, clk: clk}
	ctx := context.Background()
	commit := func(group string, partition int32) {
		t.Helper()
		if err := b.CommitOffsets(ctx, group, []CommittedOffset{{Topic: "t", Partition: partition, Offset: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	committed := func() map[string][]int32 {
		out := map[string][]int32{}
		for _, g := range b.OffsetGroups() {
			offs, _ := b.FetchOffsets(g, nil)
			for _, o := range offs {
				out[g] = append(out[g], o.Partition)
			}
		}
		return out
	}
	var since time.Time
	check := func(at time.Duration, want map[string][]int32) {
		t.Helper()
		since = s.expireOffsets(ctx, fakeEpoch.Add(at), since)
		if got := committed(); !reflect.DeepEqual(got, want) {
			t.Fatalf("at %v: committed %v, want %v", at, got, want)
		}
	}

	// "solo" only commits; "left" and "live" have a member each.
	commit("solo", 0)
	commit("left", 0)
	commit("live", 0)
	h.newMember(jp("live", ""))
	leftID, _ := h.newMember(jp("left", ""))
	check(0, map[string][]int32{"solo": {0}, "left": {0}, "live": {0}})
	if !since.Equal(fakeEpoch) {
		t.Fatalf("first seen coordinating at %v, want %v", since, fakeEpoch)
	}

	// A day on, "solo"'s offset expired; the others have members.
	check(day-time.Second, map[string][]int32{"solo": {0}, "left": {0}, "live": {0}})
	check(day, map[string][]int32{"left": {0}, "live": {0}})

	// Day 2: "left" is left empty, "solo" commits again.
	clk.set(2 * day)
	if e, _ := s.groups.leave("left", []leaveMember{{memberID: leftID}}); e != nil {
		t.Fatal(e)
	}
	commit("solo", 1)
	check(3*day-time.Second, map[string][]int32{"solo": {1}, "left": {0}, "live": {0}})
	// A day after: "solo" and "left" gone, "live" kept with its member.
	check(3*day, map[string][]int32{"live": {0}})
	check(30*day, map[string][]int32{"live": {0}})
	if len(s.groups.emptied) != 0 {
		t.Fatalf("emptied times kept of groups with no offsets: %v", s.groups.emptied)
	}

	// The coordinator moves away (its groups dropped), then back: the
	// retention starts again from the node's return.
	b.moveCoordinator(2)
	s.groups.reset()
	check(40*day, map[string][]int32{"live": {0}})
	if !since.IsZero() {
		t.Fatalf("since %v while another node coordinates", since)
	}
	b.moveCoordinator(1)
	check(50*day, map[string][]int32{"live": {0}})
	check(51*day-time.Second, map[string][]int32{"live": {0}})
	check(51*day, map[string][]int32{})

	// The role moves away and back between two checks: the groups
	// dropped then (members still rejoining) count from that moment.
	commit("back", 0)
	h.newMember(jp("back", ""))
	check(60*day, map[string][]int32{"back": {0}})
	clk.set(60*day + time.Hour)
	b.moveCoordinator(2)
	s.groups.reset()
	b.moveCoordinator(1)
	check(61*day, map[string][]int32{"back": {0}})
	check(61*day+time.Hour, map[string][]int32{})

	// A Stable consumer group (its member subscribes to t): its offsets
	// of another topic expire by their commit time, those of t stay.
	clk.set(70 * day)
	h.stable("sub", 1)
	commit("sub", 0)
	if err := b.CommitOffsets(ctx, "sub", []CommittedOffset{{Topic: "u", Partition: 0, Offset: 1}}); err != nil {
		t.Fatal(err)
	}
	check(71*day-time.Second, map[string][]int32{"sub": {0, 0}})
	check(71*day, map[string][]int32{"sub": {0}})
	if offs, _ := b.FetchOffsets("sub", nil); len(offs) != 1 || offs[0].Topic != "t" {
		t.Fatalf("the Stable group's offsets: %+v, want t's", offs)
	}
	check(80*day, map[string][]int32{"sub": {0}})

	// The role moves away and back, and a Stable group forms of only
	// some of the members rejoining: the offsets of a topic only a member
	// still to rejoin reads count from the move, not from their commit.
	clk.set(90 * day)
	onU := jp("part", "")
	onU.protocols = []groupProtocol{{name: "range", metadata: consumerMeta("u")}}
	h.newMember(onU)
	if err := b.CommitOffsets(ctx, "part", []CommittedOffset{{Topic: "u", Partition: 0, Offset: 1}}); err != nil {
		t.Fatal(err)
	}
	check(100*day, map[string][]int32{"sub": {0}, "part": {0}})
	clk.set(100*day + time.Hour)
	b.moveCoordinator(2)
	s.groups.reset()
	b.moveCoordinator(1)
	h.stable("part", 1) // a member on t only
	check(100*day+2*time.Hour, map[string][]int32{"sub": {0}, "part": {0}})
	check(101*day+time.Hour, map[string][]int32{})
}

// TestOffsetRetentionNever: a negative retention keeps every offset.
func TestOffsetRetentionNever(t *testing.T) {
	b := newMemBroker(t)
	s := NewServer(b, WithLogger(testkit.Logger(t, hclog.Off)), WithGroupConfig(GroupConfig{OffsetsRetention: -1}))
	clk := &fakeClock{}
	s.groups.clock, b.clock = clk, clk
	ctx := context.Background()
	if err := b.CommitOffsets(ctx, "g", []CommittedOffset{{Topic: "t", Offset: 1}}); err != nil {
		t.Fatal(err)
	}
	var since time.Time
	for _, at := range []time.Duration{0, time.Hour, 1000 * 24 * time.Hour} {
		since = s.expireOffsets(ctx, fakeEpoch.Add(at), since)
	}
	if got := b.OffsetGroups(); len(got) != 1 {
		t.Fatalf("groups with offsets: %v", got)
	}
}
