package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestWarnFileLimit: a node that may hold more replicas than its limit on
// open files allows says so at start; one within it says nothing.
func TestWarnFileLimit(t *testing.T) {
	limit := openFileLimit()
	if limit == 0 {
		t.Skip("no limit on open files to read here")
	}
	fits := (int(limit) - descriptorReserve) / descriptorsPerReplica
	for _, c := range []struct {
		max  int
		warn bool
	}{{-1, true}, {fits + 1, true}, {max(fits, 0), false}} {
		var out bytes.Buffer
		warnFileLimit(hclog.New(&hclog.LoggerOptions{Output: &out}), c.max)
		if got := strings.Contains(out.String(), "limit on open files"); got != c.warn {
			t.Errorf("max %d of %d that fit: warned %v, want %v (%q)", c.max, fits, got, c.warn, out.String())
		}
	}
}
