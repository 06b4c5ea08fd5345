// Package freeport picks loopback addresses for the clusters that tests,
// benchmarks and the dev command start in one process. A port is taken
// below the kernel's ephemeral range, so no outgoing connection's source
// port can take it between the pick and the listen (the usual way, a
// listen on port 0 then close, hands out exactly the ports that outgoing
// connections use next), it is free for TCP and UDP (memberlist binds
// both), and no port is handed out twice in a process.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// The range picked from: below Linux's default ephemeral range
// (32768–60999), above the registered ports most daemons use, and below
// 29092–29394, which cmd/raftlog's upgrade test must listen on (its
// data from an earlier release names them in Raft's configurations) while
// other packages' tests run beside it.
const (
	low  = 20000
	high = 29000
)

var (
	mu     sync.Mutex
	handed = map[int]bool{}
)

// Addr returns "127.0.0.1:port" with a port free right now.
func Addr() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	for try := 0; try < 4*(high-low); try++ {
		p := low + rand.IntN(high-low)
		if handed[p] || !free(p) {
			continue
		}
		handed[p] = true
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
	}
	return "", fmt.Errorf("freeport: no free loopback port in [%d, %d)", low, high)
}

func free(p int) bool {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	ln.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	pc.Close()
	return true
}
