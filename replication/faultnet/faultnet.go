// Package faultnet is a fault-injecting network for tests of replicated
// groups in one process: every connection between nodes is dialed through
// a Network, which can partition nodes (refusing new connections and
// cutting existing ones), drop a node's links, and delay traffic per link.
// Traffic stays on loopback.
package faultnet

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Network is the set of links between test nodes, named by their listen
// addresses.
type Network struct {
	mu      sync.Mutex
	blocked map[link]bool
	delay   map[link]time.Duration
	conns   map[*conn]struct{}
}

type link struct{ from, to string }

// ErrBlocked is the dial error across a partition.
var ErrBlocked = errors.New("faultnet: link blocked")

// New returns a network with every link up.
func New() *Network {
	return &Network{blocked: map[link]bool{}, delay: map[link]time.Duration{}, conns: map[*conn]struct{}{}}
}

// Dialer returns the dial function of node from.
func (n *Network) Dialer(from string) func(addr string, timeout time.Duration) (net.Conn, error) {
	return func(addr string, timeout time.Duration) (net.Conn, error) {
		n.mu.Lock()
		bad := n.blocked[link{from, addr}] || n.blocked[link{addr, from}]
		n.mu.Unlock()
		if bad {
			return nil, ErrBlocked
		}
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return nil, err
		}
		fc := &conn{Conn: c, net: n, l: link{from, addr}}
		n.mu.Lock()
		if n.blocked[fc.l] || n.blocked[link{addr, from}] {
			n.mu.Unlock()
			c.Close()
			return nil, ErrBlocked
		}
		n.conns[fc] = struct{}{}
		n.mu.Unlock()
		return fc, nil
	}
}

// Partition splits the nodes into sides that cannot reach each other.
// Nodes not named keep their links.
func (n *Network) Partition(sides ...[]string) {
	n.mu.Lock()
	for i, a := range sides {
		for j, b := range sides {
			if i == j {
				continue
			}
			for _, x := range a {
				for _, y := range b {
					n.blocked[link{x, y}] = true
				}
			}
		}
	}
	n.mu.Unlock()
	n.cut()
}

// Isolate cuts node off from every other node in nodes.
func (n *Network) Isolate(node string, nodes []string) {
	var rest []string
	for _, x := range nodes {
		if x != node {
			rest = append(rest, x)
		}
	}
	n.Partition([]string{node}, rest)
}

// Heal restores every link.
func (n *Network) Heal() {
	n.mu.Lock()
	n.blocked = map[link]bool{}
	n.delay = map[link]time.Duration{}
	n.mu.Unlock()
}

// SetDelay delays every write on the link between a and b (both ways).
func (n *Network) SetDelay(a, b string, d time.Duration) {
	n.mu.Lock()
	n.delay[link{a, b}] = d
	n.delay[link{b, a}] = d
	n.mu.Unlock()
}

// cut closes the connections across blocked links.
func (n *Network) cut() {
	n.mu.Lock()
	var doomed []*conn
	for c := range n.conns {
		if n.blocked[c.l] || n.blocked[link{c.l.to, c.l.from}] {
			doomed = append(doomed, c)
			delete(n.conns, c)
		}
	}
	n.mu.Unlock()
	for _, c := range doomed {
		c.Conn.Close()
	}
}

type conn struct {
	net.Conn
	net  *Network
	l    link
	once sync.Once
}

func (c *conn) Write(p []byte) (int, error) {
	c.net.mu.Lock()
	d := c.net.delay[c.l]
	bad := c.net.blocked[c.l]
	c.net.mu.Unlock()
	if bad {
		c.Close()
		return 0, ErrBlocked
	}
	if d > 0 {
		time.Sleep(d) // the injected latency itself, not synchronisation
	}
	return c.Conn.Write(p)
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.net.mu.Lock()
		delete(c.net.conns, c)
		c.net.mu.Unlock()
	})
	return c.Conn.Close()
}
