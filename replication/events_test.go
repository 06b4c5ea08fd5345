package replication

import (
	"bufio"
	"bytes"
	"encoding/json"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// lockedBuffer is a bytes.Buffer safe for the loggers of several replicas.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			out = append(out, map[string]any{"@message": "NOT JSON: " + sc.Text()})
			continue
		}
		out = append(out, m)
	}
	return out
}

// With JSON logging at info, the significant events of a replica are one
// JSON line each, naming their group: leadership won (and the leader
// ready), a segment rolled, the leader's node gone and another leadership
// won.
func TestEventLogLines(t *testing.T) {
	var buf lockedBuffer
	g := newTestGroup(t, 3, func(g *tgroup) {
		g.logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &buf, JSONFormat: true, Name: "raftlog"})
		g.logCfg.SegmentBytes = 16 << 10
	})
	a := acked{}
	g.produceTo(a, 0, 400) // about 60 KiB: segments roll
	first := g.leader()
	g.kill(first)
	g.produceTo(a, 400, 20)
	count := map[string]int{}
	for _, m := range buf.lines() {
		msg, _ := m["@message"].(string)
		if len(msg) > 9 && msg[:9] == "NOT JSON:" {
			t.Fatalf("a log line is not JSON: %s", msg)
		}
		switch msg {
		case "leadership won", "leader ready: every earlier entry applied", "segment rolled":
			if _, ok := m["group"]; !ok {
				t.Fatalf("event %q names no group: %v", msg, m)
			}
			count[msg]++
		}
	}
	if count["leadership won"] < 2 || count["leader ready: every earlier entry applied"] < 2 || count["segment rolled"] < 3 {
		t.Fatalf("events logged: %v", count)
	}
}
