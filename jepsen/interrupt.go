package main

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// The teardown of what a run set up (nodes, namespaces, containers) runs
// on a normal end through defer, and on SIGINT or SIGTERM through the
// same functions, so an interrupted campaign leaves no process, namespace,
// veth or container behind.
var (
	cleanupMu sync.Mutex
	cleanups  []func()
)

// atExit registers f to run on interrupt and returns it wrapped to run at
// most once, for the caller to defer.
func atExit(f func()) func() {
	var once sync.Once
	g := func() { once.Do(f) }
	cleanupMu.Lock()
	cleanups = append(cleanups, g)
	cleanupMu.Unlock()
	return g
}

// handleInterrupts makes SIGINT and SIGTERM run the registered teardowns,
// newest first, and exit with status 130.
func handleInterrupts() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-ch
		fmt.Fprintf(os.Stderr, "jepsen: %v: stopping the nodes and removing the network\n", sig)
		cleanupMu.Lock()
		fs := append([]func(){}, cleanups...)
		cleanupMu.Unlock()
		for i := len(fs) - 1; i >= 0; i-- {
			fs[i]()
		}
		os.Exit(130)
	}()
}
