package main

import (
	"fmt"
	"io"
	"net/http"
	"time"
)

// runHealth is `raftlog health`: the health check of images that have no
// shell or curl.
func runHealth(args []string, stdout, stderr io.Writer) int {
	c := newCommand("health", "", "Exit 0 when URL answers 200 (printing its answer), 1 otherwise: the health check of images that have no shell or curl.")
	url := c.String("url", "http://127.0.0.1:9392/readyz", "URL that must answer 200")
	timeout := c.Duration("timeout", 2*time.Second, "give up when URL has not answered within this long")
	pos, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if code, ok := c.noArgs(pos, stderr); !ok {
		return code
	}
	if *timeout <= 0 {
		return c.fail(stderr, "--timeout %v: want more than 0", *timeout)
	}
	cl := &http.Client{Timeout: *timeout}
	resp, err := cl.Get(*url)
	if err != nil {
		fmt.Fprintf(stderr, "raftlog health: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "%s: %s", resp.Status, body)
		return 1
	}
	fmt.Fprintf(stdout, "%s", body)
	return 0
}
