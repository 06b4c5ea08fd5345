package replication

import (
	"context"
	"testing"
	"time"
)

func names(nds []*tnode) []string {
	var out []string
	for _, nd := range nds {
		out = append(out, nd.addr)
	}
	return out
}

func others(all, some []*tnode) []*tnode {
	var out []*tnode
	for _, nd := range all {
		in := false
		for _, s := range some {
			in = in || s == nd
		}
		if !in {
			out = append(out, nd)
		}
	}
	return out
}

func shortCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

// needPoison skips a test that relies on released arena chunks being
// overwritten, which only race-detector builds do.
func needPoison(t *testing.T) {
	t.Helper()
	if !poisonReleasedChunks {
		t.Skip("released chunks are overwritten only in -race builds (go test -race)")
	}
}
