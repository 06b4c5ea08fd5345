package cluster

import (
	"fmt"
	"testing"
)

// balanceFixture is nodes × parts, every node a caught-up voting replica
// of every partition, every partition led by leader.
func balanceFixture(nodes, parts int, leader int32) ([]balancePart, map[int32]*nodeReport) {
	var ps []balancePart
	reports := map[int32]*nodeReport{}
	var all []int32
	for id := int32(1); id <= int32(nodes); id++ {
		all = append(all, id)
		reports[id] = &nodeReport{Node: id, UptimeMs: 3600_000, Groups: map[string]groupReport{}}
	}
	for p := 0; p < parts; p++ {
		g := fmt.Sprintf("t-%d@00", p)
		ps = append(ps, balancePart{Group: g, Replicas: all})
		for _, id := range all {
			gr := groupReport{Term: 2, End: 10, HW: 10}
			if id == leader {
				gr.Leader, gr.Voters = true, all
			}
			reports[id].Groups[g] = gr
		}
	}
	return ps, reports
}

func applyMoves(t *testing.T, reports map[int32]*nodeReport, moves []leaderMove) map[int32]int {
	t.Helper()
	for _, m := range moves {
		src := reports[m.From].Groups[m.Group]
		if !src.Leader {
			t.Fatalf("move %+v: node %d does not lead it", m, m.From)
		}
		dst := reports[m.To].Groups[m.Group]
		src.Leader, dst.Leader, dst.Voters = false, true, src.Voters
		dst.Term = src.Term + 1
		reports[m.From].Groups[m.Group], reports[m.To].Groups[m.Group] = src, dst
	}
	counts := map[int32]int{}
	for id, rep := range reports {
		for _, gr := range rep.Groups {
			if gr.Leader {
				counts[id]++
			}
		}
	}
	return counts
}

func always(int32) bool { return true }

func TestPlanLeaderMovesSpreadsAndStops(t *testing.T) {
	parts, reports := balanceFixture(3, 6, 1)
	moves := planLeaderMoves(parts, reports, always, nil, 100)
	if len(moves) != 4 {
		t.Fatalf("%d moves, want 4 (6/0/0 to 2/2/2): %+v", len(moves), moves)
	}
	counts := applyMoves(t, reports, moves)
	for id := int32(1); id <= 3; id++ {
		if counts[id] != 2 {
			t.Fatalf("leaders after the moves: %v", counts)
		}
	}
	// Balanced: nothing more to do, in any later round.
	if again := planLeaderMoves(parts, reports, always, nil, 100); len(again) != 0 {
		t.Fatalf("moves on a balanced cluster: %+v", again)
	}
	// Seven partitions on three nodes: 3/2/2 is as even as it gets.
	parts, reports = balanceFixture(3, 7, 2)
	counts = applyMoves(t, reports, planLeaderMoves(parts, reports, always, nil, 100))
	if again := planLeaderMoves(parts, reports, always, nil, 100); len(again) != 0 || counts[1]+counts[2]+counts[3] != 7 || max(counts[1], counts[2], counts[3]) != 3 {
		t.Fatalf("7 partitions: %v, then %+v", counts, again)
	}
}

func TestPlanLeaderMovesBounded(t *testing.T) {
	parts, reports := balanceFixture(3, 6, 1)
	moves := planLeaderMoves(parts, reports, always, nil, 1)
	if len(moves) != 1 || moves[0].From != 1 {
		t.Fatalf("moves: %+v", moves)
	}
	// A partition moves at most once per round.
	seen := map[string]bool{}
	for _, m := range planLeaderMoves(parts, reports, always, nil, 100) {
		if seen[m.Group] {
			t.Fatalf("%s moved twice in one round", m.Group)
		}
		seen[m.Group] = true
	}
}

func TestPlanLeaderMovesSkipsUnfitTargets(t *testing.T) {
	parts, reports := balanceFixture(3, 6, 1)
	// Node 3 just restarted: no leadership for it.
	inGrace := func(id int32) bool { return id != 3 }
	moves := planLeaderMoves(parts, reports, inGrace, nil, 100)
	for _, m := range moves {
		if m.To == 3 {
			t.Fatalf("move to a node in its grace period: %+v", m)
		}
	}
	if counts := applyMoves(t, reports, moves); counts[1] != 3 || counts[2] != 3 {
		t.Fatalf("leaders: %v, want 3/3/0", counts)
	}

	parts, reports = balanceFixture(3, 3, 1)
	g0, g1, g2 := parts[0].Group, parts[1].Group, parts[2].Group
	// g0: gated on node 2, behind on node 3. g1: node 2 not a voter,
	// node 3 gated. g2: node 2 behind, node 3 has no replica.
	set := func(id int32, g string, f func(*groupReport)) {
		gr := reports[id].Groups[g]
		f(&gr)
		reports[id].Groups[g] = gr
	}
	set(2, g0, func(gr *groupReport) { gr.Gated = true })
	set(3, g0, func(gr *groupReport) { gr.End = 9 })
	set(1, g1, func(gr *groupReport) { gr.Voters = []int32{1, 3} })
	set(3, g1, func(gr *groupReport) { gr.Gated = true })
	set(2, g2, func(gr *groupReport) { gr.End = 3 })
	delete(reports[3].Groups, g2)
	if moves := planLeaderMoves(parts, reports, always, nil, 100); len(moves) != 0 {
		t.Fatalf("moves to unfit replicas: %+v", moves)
	}
	// Once node 3 catches up on g0, that one moves.
	set(3, g0, func(gr *groupReport) { gr.End = 10 })
	if moves := planLeaderMoves(parts, reports, always, nil, 100); len(moves) != 1 || moves[0] != (leaderMove{g0, 1, 3}) {
		t.Fatalf("moves: %+v", moves)
	}
	// A transfer that failed last round is not planned again at once.
	if moves := planLeaderMoves(parts, reports, always, map[leaderMove]bool{{g0, 1, 3}: true}, 100); len(moves) != 0 {
		t.Fatalf("failed move planned again: %+v", moves)
	}
}

func TestReassignCommands(t *testing.T) {
	m := newMeta()
	m.applyOne(command{Op: "create_topic", Topic: "t", TopicID: "00112233445566778899aabbccddeeff", Assignment: [][]int32{{1, 2, 3}}}, 0, false)
	m.applyOne(command{Op: "reassign", Topic: "t", Partition: 0, Replicas: []int32{4, 2, 3}}, 1, false)
	tp, _ := m.Topic("t")
	if fmt.Sprint(tp.Partitions[0]) != "[1 2 3 4]" || fmt.Sprint(tp.Reassigning[0]) != "{[4 2 3] [1 2 3]}" {
		t.Fatalf("after reassign: %v %v", tp.Partitions, tp.Reassigning)
	}
	// A new target while moving: the origin stays, every replica stays
	// assigned until the move is done.
	m.applyOne(command{Op: "reassign", Topic: "t", Partition: 0, Replicas: []int32{5, 2, 3}}, 2, false)
	tp, _ = m.Topic("t")
	if fmt.Sprint(tp.Partitions[0]) != "[1 2 3 4 5]" || fmt.Sprint(tp.Reassigning[0]) != "{[5 2 3] [1 2 3]}" {
		t.Fatalf("after a second reassign: %v %v", tp.Partitions, tp.Reassigning)
	}
	// A done for another target is ignored.
	m.applyOne(command{Op: "reassign_done", Topic: "t", Partition: 0, Replicas: []int32{4, 2, 3}}, 3, false)
	if tp, _ = m.Topic("t"); len(tp.Reassigning) != 1 {
		t.Fatalf("stale done applied: %v", tp.Partitions)
	}
	// Cancel: back to the origin.
	m.applyOne(command{Op: "reassign", Topic: "t", Partition: 0, Cancel: true}, 4, false)
	tp, _ = m.Topic("t")
	if fmt.Sprint(tp.Reassigning[0].Target) != "[1 2 3]" {
		t.Fatalf("after cancel: %v", tp.Reassigning)
	}
	m.applyOne(command{Op: "reassign_done", Topic: "t", Partition: 0, Replicas: []int32{1, 2, 3}}, 5, false)
	tp, _ = m.Topic("t")
	if fmt.Sprint(tp.Partitions[0]) != "[1 2 3]" || len(tp.Reassigning) != 0 {
		t.Fatalf("after done: %v %v", tp.Partitions, tp.Reassigning)
	}
	// The copy is deep.
	tp.Partitions[0][0] = 9
	if tp2, _ := m.Topic("t"); tp2.Partitions[0][0] != 1 {
		t.Fatal("Topic returned shared replicas")
	}
	// Wrong topic id, partition out of range: no change.
	m.applyOne(command{Op: "reassign", Topic: "t", TopicID: "ffffffffffffffffffffffffffffffff", Partition: 0, Replicas: []int32{4, 2, 3}}, 6, false)
	m.applyOne(command{Op: "reassign", Topic: "t", Partition: 1, Replicas: []int32{4, 2, 3}}, 7, false)
	if tp, _ = m.Topic("t"); len(tp.Reassigning) != 0 {
		t.Fatalf("applied: %v", tp.Reassigning)
	}
}
