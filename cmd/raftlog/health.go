package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

// runHealth is `raftlog health`: the health check of images that have no
// shell or curl.
func runHealth(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://127.0.0.1:9392/readyz", "URL that must answer 200")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cl := &http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get(*url)
	if err != nil {
		fmt.Fprintln(stderr, err)
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
