package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/raftlog/raftlog/log"
)

// runLogDump is `raftlog log dump`, after Kafka's kafka-dump-log: it lists
// every batch of each segment and checks the .index and .timeindex against
// the log. Exit status 1 when any problem is found.
func runLogDump(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("log dump", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quiet := fs.Bool("quiet", false, "print only the per-segment summary and problems, not every batch")
	indexDir := fs.String("index-dir", "", "directory of the .index/.timeindex files (default: beside each .log)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: raftlog log dump [--quiet] [--index-dir DIR] <segment.log | partition dir>...")
		return 2
	}
	var files []string
	for _, p := range fs.Args() {
		st, err := os.Stat(p)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".log") {
				files = append(files, filepath.Join(p, e.Name()))
			}
		}
	}
	bad := false
	for _, f := range files {
		fmt.Fprintf(stdout, "Dumping %s\n", f)
		res, err := log.InspectSegment(f, *indexDir, func(b log.BatchInfo) {
			if *quiet {
				return
			}
			fmt.Fprintf(stdout, "baseOffset: %d lastOffset: %d count: %d position: %d size: %d baseTimestamp: %d maxTimestamp: %d leaderEpoch: %d producerId: %d codec: %d control: %v crcOk: %v\n",
				b.BaseOffset, b.LastOffset, b.Records, b.Position, b.Size, b.BaseTimestamp, b.MaxTimestamp, b.LeaderEpoch, b.ProducerID, b.Codec, b.Control, b.CRCOK)
		})
		if err != nil {
			fmt.Fprintf(stdout, "  error: %v\n", err)
			bad = true
			continue
		}
		fmt.Fprintf(stdout, "  batches: %d bytes: %d of %d next offset: %d index entries: %d time index entries: %d\n",
			res.Batches, res.Bytes, res.FileSize, res.NextOffset, res.IndexEntries, res.TimeEntries)
		for _, p := range res.Problems {
			fmt.Fprintf(stdout, "  PROBLEM: %s\n", p)
			bad = true
		}
		if len(res.Problems) == 0 {
			fmt.Fprintln(stdout, "  indexes agree with the log")
		}
	}
	if bad {
		return 1
	}
	return 0
}
