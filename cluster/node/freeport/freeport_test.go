package freeport

import (
	"net"
	"strconv"
	"testing"
)

// Addresses are distinct, in the range, and can be listened on for TCP
// and UDP.
func TestAddr(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		a, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
		_, ps, _ := net.SplitHostPort(a)
		if p, _ := strconv.Atoi(ps); p < low || p >= high {
			t.Fatalf("%s outside [%d, %d)", a, low, high)
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		pc, err := net.ListenPacket("udp", a)
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		pc.Close()
	}
}
