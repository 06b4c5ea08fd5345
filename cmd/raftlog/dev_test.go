package main

import "testing"

// The commands dev suggests name the program as it was run.
func TestSelfCommand(t *testing.T) {
	for arg0, want := range map[string]string{
		"/tmp/go-build3178/b001/exe/raftlog": "go run ./cmd/raftlog",
		"raftlog":                            "raftlog",
		"./raftlog":                          "./raftlog",
		"/usr/local/bin/raftlog":             "/usr/local/bin/raftlog",
	} {
		if got := selfCommand(arg0); got != want {
			t.Errorf("selfCommand(%q) = %q, want %q", arg0, got, want)
		}
	}
}
