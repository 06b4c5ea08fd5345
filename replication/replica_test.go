package replication

import (
	"testing"
)

func TestReplicatedAppendThreeAndFive(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(map[int]string{3: "3", 5: "5"}[n], func(t *testing.T) {
			g := newTestGroup(t, n)
			ld := g.leader()
			a := acked{}
			g.produce(ld, a, 0, 50)
			g.checkConverged(a)
		})
	}
}

func TestLeaderKillAndRestart(t *testing.T) {
	g := newTestGroup(t, 3)
	a := acked{}
	ld := g.leader()
	g.produce(ld, a, 0, 20)
	g.kill(ld)
	var rest []*tnode
	for _, nd := range g.nodes {
		if nd != ld {
			rest = append(rest, nd)
		}
	}
	nl := g.leader(rest...)
	g.produce(nl, a, 20, 20)
	g.start(ld)
	g.produce(g.leader(), a, 40, 10)
	g.checkConverged(a)
	if ld.rep.Gated() {
		t.Fatal("a kill -9 restart on the same boot must not be gated")
	}
}

func TestPartitionMinorityAndMajority(t *testing.T) {
	g := newTestGroup(t, 5)
	a := acked{}
	ld := g.leader()
	g.produce(ld, a, 0, 10)
	// The leader alone in a minority: a new leader is elected in the
	// majority, the old one cannot commit.
	var minority, majority []*tnode
	for _, nd := range g.nodes {
		if nd == ld || (len(minority) < 2 && nd != ld && len(majority) >= 3) {
			minority = append(minority, nd)
		} else {
			majority = append(majority, nd)
		}
	}
	g.net.Partition(names(minority), names(majority))
	nl := g.leader(majority...)
	g.produce(nl, a, 10, 10)
	if _, err := ld.rep.Append(shortCtx(t), testBatch(999, 10), AcksAll); err == nil {
		t.Fatal("the old leader in a minority acknowledged a write")
	}
	g.net.Heal()
	g.produceTo(a, 20, 10)
	g.checkConverged(a)
	// A majority partition the other way round: the minority side now
	// holds the leader's followers only.
	ld = g.leader()
	var side []*tnode
	for _, nd := range g.nodes {
		if nd != ld && len(side) < 2 {
			side = append(side, nd)
		}
	}
	g.net.Partition(names(side), names(others(g.nodes, side)))
	g.produceTo(a, 30, 10)
	g.net.Heal()
	g.checkConverged(a)
}
