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
