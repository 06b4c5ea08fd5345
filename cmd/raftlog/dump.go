package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/raftlog/raftlog/log"
)

const logDumpSynopsis = "usage: raftlog log dump [--quiet] [--index-dir DIR] SEGMENT.log|PARTITION-DIR...\nRun 'raftlog log dump -h' for more."

// runLogDump is `raftlog log dump`, after Kafka's kafka-dump-log: it lists
// every batch of each segment and checks the .index and .timeindex against
// the log. Exit status 1 when any problem is found.
func runLogDump(args []string, stdout, stderr io.Writer) int {
	c := newCommand("log dump", "SEGMENT.log|PARTITION-DIR...", `List every batch of each segment (a .log file, or every .log file of a
directory such as DATA-DIR/TOPIC-PARTITION/log) and check the .index and
.timeindex against the log. Exit status 1 when any problem is found, or when
a directory holds no segment.`)
	quiet := c.Bool("quiet", false, "print only the per-segment summary and problems, not every batch")
	indexDir := c.String("index-dir", "", "directory of the .index/.timeindex files (default: beside each .log)")
	pos, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return c.fail(stderr, "a segment file or partition directory is needed")
	}
	var files []string
	for _, p := range pos {
		st, err := os.Stat(p)
		if err != nil {
			fmt.Fprintf(stderr, "raftlog log dump: %v\n", err)
			return 1
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			fmt.Fprintf(stderr, "raftlog log dump: %v\n", err)
			return 1
		}
		n := len(files)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".log") && e.Type().IsRegular() {
				files = append(files, filepath.Join(p, e.Name()))
			}
		}
		if len(files) == n {
			hint := ""
			if _, err := os.Stat(filepath.Join(p, "log")); err == nil {
				hint = fmt.Sprintf(" (a partition's segments are in %s)", filepath.Join(p, "log"))
			}
			fmt.Fprintf(stderr, "raftlog log dump: %s holds no segment (.log) file%s\n", p, hint)
			return 1
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
