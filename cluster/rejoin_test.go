package cluster_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/cluster/clustertest"
	"github.com/raftlog/raftlog/cluster/node"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// memberIDs lists the node ids of a node's live members.
func memberIDs(nd *node.Node) []int32 {
	var ids []int32
	for _, b := range nd.Brokers() {
		ids = append(ids, b.NodeID)
	}
	return ids
}

// waitRegistered waits until every node that is up has every node of the
// cluster in its registry.
func waitRegistered(t *testing.T, c *clustertest.Cluster) {
	t.Helper()
	clustertest.WaitFor(t, "every node registered everywhere", 30*time.Second, func() bool {
		for i, nd := range c.Nodes {
			if !c.Down(i) && len(nd.Meta().Brokers()) != len(c.Nodes) {
				return false
			}
		}
		return true
	})
}

// TestRestartedSeedRejoins: every node is started with --join naming node
// 1's gossip address, node 1's own included, as a user starts them. Node 1
// stops cleanly and starts again with the same configuration: its seed
// list names only itself, and the others saw it leave; it rejoins the
// members it knows from the registry, and every node's view has all three
// again.
func TestRestartedSeedRejoins(t *testing.T) {
	c := clustertest.StartWith(t, 3, func(_ int, nc *node.Config) {
		nc.Cluster.Join = nc.Cluster.Join[:1]
	})
	waitRegistered(t, c)
	all := []int32{1, 2, 3}
	for i, nd := range c.Nodes {
		if got := memberIDs(nd); !slices.Equal(got, all) {
			t.Fatalf("node %d's members before the restart: %v", i+1, got)
		}
	}
	for round := range 2 {
		c.Stop(0)
		clustertest.WaitFor(t, "node 1 gone from the others' views", 30*time.Second, func() bool {
			return !slices.Contains(memberIDs(c.Nodes[1]), 1) && !slices.Contains(memberIDs(c.Nodes[2]), 1)
		})
		c.Restart(0)
		clustertest.Eventually(t, 30*time.Second, func() error {
			for i, nd := range c.Nodes {
				if got := memberIDs(nd); !slices.Equal(got, all) {
					return fmt.Errorf("round %d: node %d's members are %v, want %v", round, i+1, got, all)
				}
			}
			return nil
		})
		clustertest.Eventually(t, 30*time.Second, func() error {
			if ok, why := c.Nodes[0].Ready(); !ok {
				return fmt.Errorf("round %d: node 1 not ready: %s", round, why)
			}
			return nil
		})
	}
}

// metadata sends one Metadata request (v12, every topic) to a Kafka
// address over a plain connection.
func metadata(t *testing.T, addr string) *kmsg.MetadataResponse {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(12)
	if _, err := conn.Write(kmsg.NewRequestFormatter(kmsg.FormatterClientID("test")).AppendRequest(nil, req, 1)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	var size [4]byte
	if _, err := io.ReadFull(br, size[:]); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(br, p); err != nil {
		t.Fatal(err)
	}
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	resp.SetVersion(12)
	if err := resp.ReadFrom(p[5:]); err != nil { // correlation id, header tags
		t.Fatal(err)
	}
	return resp
}

// consistent checks that a Metadata answer lists every leader and the
// controller it names.
func consistent(resp *kmsg.MetadataResponse) error {
	listed := map[int32]bool{}
	for _, b := range resp.Brokers {
		listed[b.NodeID] = true
	}
	if resp.ControllerID >= 0 && !listed[resp.ControllerID] {
		return fmt.Errorf("controller %d not among the brokers", resp.ControllerID)
	}
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			if p.Leader >= 0 && !listed[p.Leader] {
				return fmt.Errorf("%s/%d led by %d, not among the brokers", *tp.Topic, p.Partition, p.Leader)
			}
		}
	}
	return nil
}

// TestMetadataNamesListedLeaders: a node whose gossip view lacks the
// broker Raft says leads a partition (it has not seen it rejoin yet)
// still answers Metadata with that leader, listed at its registered Kafka
// address, and stays ready. Once the leader is neither a live member nor
// registered there, the answer names no leader for the partition, and the
// node is not ready.
func TestMetadataNamesListedLeaders(t *testing.T) {
	c := clustertest.Start(t, 3)
	c.CreateTopic("m", 1, 3)
	waitRegistered(t, c)
	l, _ := leaderOf(t, c, nil, "m", 0)
	o := (l + 1) % 3 // the observer: another replica
	obs := c.Nodes[o]
	lid := int32(l + 1)
	clustertest.Eventually(t, 30*time.Second, func() error {
		if ok, why := obs.Ready(); !ok {
			return fmt.Errorf("observer not ready: %s", why)
		}
		if ld, _ := obs.Leader("m", 0); ld != lid {
			return fmt.Errorf("observer sees leader %d, want %d", ld, lid)
		}
		return nil
	})

	obs.ForgetMember(lid)
	if slices.Contains(memberIDs(obs), lid) {
		t.Fatalf("node %d still a member: %v", lid, memberIDs(obs))
	}
	resp := metadata(t, c.Bootstrap[o])
	if err := consistent(resp); err != nil {
		t.Fatal(err)
	}
	var at string
	for _, b := range resp.Brokers {
		if b.NodeID == lid {
			at = net.JoinHostPort(b.Host, fmt.Sprint(b.Port))
		}
	}
	if at != c.Bootstrap[l] {
		t.Fatalf("leader %d listed at %q, want its registered address %s (brokers %+v)", lid, at, c.Bootstrap[l], resp.Brokers)
	}
	for _, tp := range resp.Topics {
		if *tp.Topic == "m" && (tp.Partitions[0].Leader != lid || tp.Partitions[0].ErrorCode != 0) {
			t.Fatalf("partition m/0: %+v, want led by %d", tp.Partitions[0], lid)
		}
	}
	if ok, why := obs.Ready(); !ok {
		t.Fatalf("observer not ready with a registered leader: %s", why)
	}

	obs.Unregister(lid)
	clustertest.Eventually(t, 10*time.Second, func() error {
		if ok, why := obs.Ready(); ok || !strings.Contains(why, "neither a live member nor registered") {
			return fmt.Errorf("observer ready=%v (%s) with a leader neither live nor registered", ok, why)
		}
		return nil
	})
	resp = metadata(t, c.Bootstrap[o])
	if err := consistent(resp); err != nil {
		t.Fatal(err)
	}
	for _, tp := range resp.Topics {
		if *tp.Topic == "m" && (tp.Partitions[0].Leader != -1 || tp.Partitions[0].ErrorCode != kerr.LeaderNotAvailable.Code) {
			t.Fatalf("partition m/0: %+v, want no leader named", tp.Partitions[0])
		}
	}
}

// TestRejoinTargets: a known node missing from the gossip view is joined
// at its registered gossip address; one the registry does not hold (a
// node registered by no version with the registry) but the controller's
// Raft configuration does is asked for its gossip address at its Raft
// address.
func TestRejoinTargets(t *testing.T) {
	c := clustertest.Start(t, 3)
	waitRegistered(t, c)
	nd := c.Nodes[0]
	if got := nd.RejoinTargets(); len(got) != 0 {
		t.Fatalf("targets with every node live: %v", got)
	}
	nd.ForgetMember(2)
	nd.ForgetMember(3)
	nd.Unregister(3)
	clustertest.Eventually(t, 30*time.Second, func() error {
		got := nd.RejoinTargets()
		want := map[int32]string{2: c.Cfgs[1].Cluster.GossipAddr, 3: c.Cfgs[2].Cluster.GossipAddr}
		if len(got) != 2 || got[2] != want[2] || got[3] != want[3] {
			return fmt.Errorf("targets %v, want %v", got, want)
		}
		return nil
	})
}

// TestKilledSeedMetadataConsistent: every node joins node 1's gossip
// address; node 1, leading a partition, is killed and started again. At
// every moment, every Metadata answer of every node up lists each leader
// and the controller it names; once every node is ready, every node's
// answer names a leader for every partition, and every node lists all
// three members.
func TestKilledSeedMetadataConsistent(t *testing.T) {
	c := clustertest.StartWith(t, 3, func(_ int, nc *node.Config) {
		nc.Cluster.Join = nc.Cluster.Join[:1]
	})
	c.CreateTopic("k", 3, 3)
	waitRegistered(t, c)
	// Node 1 leads partition 0.
	clustertest.Eventually(t, 30*time.Second, func() error {
		l, r := leaderOf(t, c, nil, "k", 0)
		if l == 0 {
			return nil
		}
		if err := r.TransferLeadership("", ""); err != nil {
			return err
		}
		return fmt.Errorf("node %d leads k/0", l+1)
	})
	c.Kill(0)
	c.Restart(0)
	all := []int32{1, 2, 3}
	clustertest.Eventually(t, 60*time.Second, func() error {
		for i := range c.Nodes {
			if err := consistent(metadata(t, c.Bootstrap[i])); err != nil {
				t.Fatalf("node %d: %v", i+1, err)
			}
		}
		for i, nd := range c.Nodes {
			if ok, why := nd.Ready(); !ok {
				return fmt.Errorf("node %d not ready: %s", i+1, why)
			}
			if got := memberIDs(nd); !slices.Equal(got, all) {
				return fmt.Errorf("node %d's members are %v", i+1, got)
			}
			for _, tp := range metadata(t, c.Bootstrap[i]).Topics {
				for _, p := range tp.Partitions {
					if p.Leader < 0 {
						return fmt.Errorf("node %d names no leader of %s/%d", i+1, *tp.Topic, p.Partition)
					}
				}
			}
		}
		return nil
	})
}
