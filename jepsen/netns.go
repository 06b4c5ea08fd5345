package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// A private network of Linux network namespaces, one per node, so that
// the network between nodes can be cut. Every node has its own address on
// a bridge that lives in a namespace of its own (the "switch": the host's
// firewall, which may drop bridged traffic, does not see it); the harness
// reaches the bridge from the host through one more veth pair, so clients
// in this process talk to every node even while nodes cannot talk to each
// other, as in Jepsen.
//
//	host ── <p>h ══ up0 ─┐
//	                     br0 (netns <p>-sw) ── v1 ══ eth0 (netns <p>-n1, 10.213.S.1)
//	                      ├─ v2 ══ eth0 (netns <p>-n2, 10.213.S.2)
//	                      └─ ...
//
// A partition adds blackhole routes inside the node namespaces: a packet
// to a cut-off peer is dropped as a broken link would drop it (no reset,
// no error), in both directions. Needs root and iproute2.

type netns struct {
	prefix string // names start with it
	subnet string // "10.213.S"
	n      int
	first  int // host part of node 1's address
	// ipIn runs `ip args...` inside node i's network namespace.
	ipIn func(i int, args ...string) error

	mu  sync.Mutex
	cut map[[2]int]bool // blackhole routes in place: [from, to] (1-based)
}

// netnsUsable reports whether this process can build namespaces.
func netnsUsable() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("network namespaces need iproute2's ip: %w", err)
	}
	return nil
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newNetns builds the network for n nodes. The names and the subnet are
// derived from the process id, so two runs at once do not collide.
func newNetns(n int) (*netns, error) {
	if err := netnsUsable(); err != nil {
		return nil, err
	}
	pid := os.Getpid()
	x := &netns{prefix: fmt.Sprintf("rlj%d", pid%100000), subnet: fmt.Sprintf("10.213.%d", pid%250), n: n, first: 1, cut: map[[2]int]bool{}}
	x.ipIn = func(i int, args ...string) error { return ipCmd(append([]string{"-n", x.ns(i)}, args...)...) }
	sw := x.prefix + "-sw"
	steps := [][]string{
		{"netns", "add", sw},
		{"-n", sw, "link", "set", "lo", "up"},
		{"-n", sw, "link", "add", "br0", "type", "bridge"},
		{"-n", sw, "link", "set", "br0", "up"},
		{"link", "add", x.prefix + "h", "type", "veth", "peer", "name", "up0", "netns", sw},
		{"-n", sw, "link", "set", "up0", "master", "br0", "up"},
		{"addr", "add", x.subnet + ".254/24", "dev", x.prefix + "h"},
		{"link", "set", x.prefix + "h", "up"},
	}
	for i := 1; i <= n; i++ {
		ns := x.ns(i)
		v := fmt.Sprintf("v%d", i)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"-n", ns, "link", "set", "lo", "up"},
			[]string{"-n", sw, "link", "add", v, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"-n", sw, "link", "set", v, "master", "br0", "up"},
			[]string{"-n", ns, "addr", "add", x.addr(i) + "/24", "dev", "eth0"},
			[]string{"-n", ns, "link", "set", "eth0", "up"},
		)
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			x.teardown()
			return nil, err
		}
	}
	return x, nil
}

func (x *netns) ns(i int) string   { return fmt.Sprintf("%s-n%d", x.prefix, i) }
func (x *netns) addr(i int) string { return fmt.Sprintf("%s.%d", x.subnet, x.first+i-1) }

// command runs name with args inside node i's namespace. `ip netns exec`
// replaces itself with the program, so the process is the node's.
func (x *netns) command(i int, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", x.ns(i), name}, args...)...)
}

// partition cuts every link between nodes of different sides. Nodes not
// named on any side keep every link (a bridge between the sides).
func (x *netns) partition(sides ...[]int) error {
	side := map[int]int{}
	for s, ids := range sides {
		for _, id := range ids {
			side[id] = s + 1
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for a := 1; a <= x.n; a++ {
		for b := 1; b <= x.n; b++ {
			if a == b || side[a] == 0 || side[b] == 0 || side[a] == side[b] || x.cut[[2]int{a, b}] {
				continue
			}
			if err := x.ipIn(a, "route", "add", "blackhole", x.addr(b)+"/32"); err != nil {
				return err
			}
			x.cut[[2]int{a, b}] = true
		}
	}
	return nil
}

// heal removes every cut.
func (x *netns) heal() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	var first error
	for k := range x.cut {
		if err := x.ipIn(k[0], "route", "del", "blackhole", x.addr(k[1])+"/32"); err != nil && first == nil {
			first = err
		}
		delete(x.cut, k)
	}
	return first
}

// teardown removes every namespace and link of the network.
func (x *netns) teardown() {
	for i := 1; i <= x.n; i++ {
		exec.Command("ip", "netns", "del", x.ns(i)).Run()
	}
	exec.Command("ip", "netns", "del", x.prefix+"-sw").Run()
	exec.Command("ip", "link", "del", x.prefix+"h").Run()
}
