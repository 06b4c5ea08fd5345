package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlog/raftlog/cluster/clustertest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runCLI runs the command line args and returns its exit status and
// outputs.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// commands are every subcommand, as typed.
var commands = [][]string{
	{"dev"}, {"serve"}, {"version"},
	{"topic", "create"}, {"topic", "list"}, {"topic", "describe"}, {"topic", "delete"},
	{"produce"}, {"consume"},
	{"bench", "produce"}, {"bench", "consume"}, {"bench", "compare"},
	{"health"}, {"cluster", "status"}, {"partition", "reassign"}, {"log", "dump"},
}

// TestParseFlagsAnywhere: flags before, between and after the arguments;
// "--" ends them; a bool flag takes no value; an unknown flag is an error.
func TestParseFlagsAnywhere(t *testing.T) {
	for _, tc := range []struct {
		args []string
		pos  []string
		n    int
		b    bool
		code int
	}{
		{[]string{"orders", "--n", "4"}, []string{"orders"}, 4, false, -1},
		{[]string{"-n=4", "orders", "-b"}, []string{"orders"}, 4, true, -1},
		{[]string{"--b", "a", "--n", "2", "b"}, []string{"a", "b"}, 2, true, -1},
		{[]string{"a", "--", "--n", "7"}, []string{"a", "--n", "7"}, 1, false, -1},
		{[]string{"--b=false", "a"}, []string{"a"}, 1, false, -1},
		{[]string{"a", "--nosuch"}, nil, 1, false, 2},
		{[]string{"a", "--n"}, nil, 1, false, 2},
		{[]string{"a", "--n", "x"}, nil, 1, false, 2},
		{[]string{"a", "-h"}, nil, 1, false, 0},
		{[]string{"--help"}, nil, 1, false, 0},
	} {
		c := newCommand("test", "ARGS", "")
		n := c.Int("n", 1, "a number")
		b := c.Bool("b", false, "a switch")
		var out, errb bytes.Buffer
		pos, code, ok := c.parse(tc.args, &out, &errb)
		if !ok {
			if code != tc.code {
				t.Errorf("%q: exit %d, want %d (%s)", tc.args, code, tc.code, errb.String())
			}
			continue
		}
		if tc.code >= 0 {
			t.Errorf("%q: parsed, want exit %d", tc.args, tc.code)
			continue
		}
		if strings.Join(pos, " ") != strings.Join(tc.pos, " ") || *n != tc.n || *b != tc.b {
			t.Errorf("%q: args %q n %d b %v, want %q %d %v", tc.args, pos, *n, *b, tc.pos, tc.n, tc.b)
		}
	}
}

// flagLine is a flag's line in a usage: its name and the placeholder of
// its value, which Go's flag package takes from a `quoted` word of the
// flag's usage when there is one.
var flagLine = regexp.MustCompile(`^  -([a-z0-9-]+)(?: (\S+))?$`)

// TestHelpExitsZero: -h and --help print the command's usage on standard
// output and exit 0, for every command; its flags' placeholders are
// type names, not words of their usage.
func TestHelpExitsZero(t *testing.T) {
	placeholders := map[string]bool{"string": true, "int": true, "uint": true, "float": true, "duration": true, "value": true}
	for _, cmd := range commands {
		for _, h := range []string{"-h", "--help"} {
			args := append(append([]string{}, cmd...), h)
			code, out, errs := runCLI(args...)
			name := strings.Join(cmd, " ")
			if code != 0 || errs != "" || !strings.HasPrefix(out, "usage: raftlog "+name) {
				t.Errorf("raftlog %s %s: exit %d\nstdout:\n%s\nstderr:\n%s", name, h, code, out, errs)
				continue
			}
			for _, line := range strings.Split(out, "\n") {
				if m := flagLine.FindStringSubmatch(line); m != nil && m[2] != "" && !placeholders[m[2]] {
					t.Errorf("raftlog %s -h: flag -%s shows the placeholder %q: a backquoted word of its usage", name, m[1], m[2])
				}
			}
		}
	}
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"topic", "-h"}, {"bench", "--help"}, {"cluster", "-h"}, {"partition", "-h"}, {"log", "-h"}} {
		if code, out, errs := runCLI(args...); code != 0 || out == "" || errs != "" {
			t.Errorf("raftlog %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errs)
		}
	}
}

// TestOwnFlagsOnly: each subcommand lists only the flags that apply to it.
func TestOwnFlagsOnly(t *testing.T) {
	for _, tc := range []struct {
		cmd       []string
		has, hasn []string
	}{
		{[]string{"topic", "list"}, []string{"bootstrap", "timeout"}, []string{"partitions", "replication-factor", "config"}},
		{[]string{"topic", "describe"}, []string{"bootstrap"}, []string{"partitions", "config"}},
		{[]string{"topic", "create"}, []string{"partitions", "replication-factor", "config", "timeout"}, nil},
		{[]string{"bench", "consume"}, []string{"from", "duration", "timeout"}, []string{"size", "acks", "producers", "rate", "compression", "linger", "warmup", "timeline"}},
		{[]string{"bench", "produce"}, []string{"size", "acks", "timeout"}, []string{"from"}},
		{[]string{"consume"}, []string{"from", "partition", "timeout", "exit"}, nil},
		{[]string{"produce"}, []string{"topic", "timeout"}, []string{"from", "exit"}},
	} {
		_, out, _ := runCLI(append(tc.cmd, "-h")...)
		flags := map[string]bool{}
		for _, line := range strings.Split(out, "\n") {
			if m := flagLine.FindStringSubmatch(line); m != nil {
				flags[m[1]] = true
			}
		}
		for _, f := range tc.has {
			if !flags[f] {
				t.Errorf("raftlog %s -h does not list -%s:\n%s", strings.Join(tc.cmd, " "), f, out)
			}
		}
		for _, f := range tc.hasn {
			if flags[f] {
				t.Errorf("raftlog %s -h lists -%s, which does not apply:\n%s", strings.Join(tc.cmd, " "), f, out)
			}
		}
	}
}

// TestUnknownCommand: an unknown command is named, with where to find the
// commands, and not drowned in the whole usage.
func TestUnknownCommand(t *testing.T) {
	for _, args := range [][]string{{"nosuch"}, {"--nosuch"}, {"topic", "nosuch"}, {"bench", "nosuch"}, {"log", "nosuch"}, {"cluster", "nosuch"}, {"partition", "nosuch"}} {
		code, out, errs := runCLI(args...)
		bad := args[len(args)-1]
		if code != 2 || out != "" || !strings.Contains(errs, bad) || !strings.Contains(errs, "unknown") {
			t.Errorf("raftlog %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errs)
		}
		if strings.Contains(errs, "raftlog dev [--nodes") {
			t.Errorf("raftlog %s prints the whole usage:\n%s", strings.Join(args, " "), errs)
		}
	}
	if _, _, errs := runCLI("nosuch"); !strings.Contains(errs, "raftlog help") {
		t.Errorf("no hint at raftlog help:\n%s", errs)
	}
}

func TestVersion(t *testing.T) {
	for _, v := range []string{"version", "--version", "-version"} {
		code, out, errs := runCLI(v)
		if code != 0 || errs != "" || !strings.HasPrefix(out, "raftlog ") || !strings.Contains(out, runtime.Version()) {
			t.Errorf("raftlog %s: exit %d\nstdout:\n%s\nstderr:\n%s", v, code, out, errs)
		}
	}
	if code, _, _ := runCLI("version", "extra"); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
}

// TestBadArgumentsRefused: extra arguments and nonsensical values are
// usage errors (exit 2), found before the cluster is asked anything (the
// bootstrap address has nothing listening: reaching for it would exit 1).
func TestBadArgumentsRefused(t *testing.T) {
	none := clustertest.FreePort(t)
	for _, args := range [][]string{
		{"topic", "create", "a", "b"},
		{"topic", "create"},
		{"topic", "create", "neg", "--partitions", "-1"},
		{"topic", "create", "zero", "--partitions", "0"},
		{"topic", "create", "x", "--replication-factor", "0"},
		{"topic", "create", "x", "--config", "novalue"},
		{"topic", "create", "x", "--timeout", "0s"},
		{"topic", "list", "extra"},
		{"topic", "describe", "a", "b"},
		{"topic", "delete"},
		{"produce"},
		{"produce", "--topic", "t", "extra"},
		{"consume"},
		{"consume", "--topic", "t", "--from", "5x"},
		{"consume", "--topic", "t", "--from", "-3"},
		{"consume", "--topic", "t", "--count", "-1"},
		{"consume", "--topic", "t", "--partition", "-2"},
		{"bench", "produce", "--size", "-5"},
		{"bench", "produce", "--producers", "0"},
		{"bench", "produce", "--acks", "2"},
		{"bench", "produce", "--partitions", "0"},
		{"bench", "consume", "--from", "middle"},
		{"bench", "consume", "--duration", "0s"},
		{"partition", "reassign", "--topic", "t"},
		{"partition", "reassign", "--topic", "t", "--partition", "0", "--replicas", "1,x"},
		{"partition", "reassign", "--topic", "t", "--partition", "0", "--replicas", "1", "--cancel"},
		{"dev", "--nodes", "0"},
		{"dev", "--log-level", "loud"},
		{"serve", "extra"},
		{"serve", "--log-level", "loud"},
		{"health", "extra"},
		{"cluster", "status", "extra"},
		{"log", "dump"},
	} {
		full := append(append([]string{}, args...), "--bootstrap", none)
		if args[0] == "dev" || args[0] == "serve" || args[0] == "health" || args[0] == "cluster" || args[0] == "log" {
			full = args
		}
		code, out, errs := runCLI(full...)
		name := "raftlog " + strings.Join(args, " ")
		if code != 2 || out != "" || !strings.Contains(errs, "raftlog ") || !strings.Contains(errs, "-h' for usage") {
			t.Errorf("%s: exit %d, want 2 and what is wrong\nstdout:\n%s\nstderr:\n%s", name, code, out, errs)
		}
	}
}

// TestUnreachableBroker: every client command says it cannot reach the
// cluster and exits 1, within about its --timeout.
func TestUnreachableBroker(t *testing.T) {
	none := clustertest.FreePort(t)
	for _, args := range [][]string{
		{"topic", "create", "t"},
		{"topic", "list"},
		{"topic", "describe", "t"},
		{"topic", "delete", "t"},
		{"produce", "--topic", "t"},
		{"consume", "--topic", "t", "--exit"},
		{"consume", "--topic", "t", "--count", "1"},
		{"bench", "produce", "--progress=false"},
		{"bench", "consume", "--progress=false"},
		{"partition", "reassign", "--topic", "t", "--partition", "0", "--replicas", "1,2"},
	} {
		start := time.Now()
		code, _, errs := runCLI(append(args, "--bootstrap", none, "--timeout", "2s")...)
		name := "raftlog " + strings.Join(args, " ")
		if code != 1 || !strings.Contains(errs, "cannot reach a broker at "+none) {
			t.Errorf("%s: exit %d, want 1 and the broker named\nstderr:\n%s", name, code, errs)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: took %v with --timeout 2s", name, d)
		}
	}
	// A health check of nothing fails too.
	if code, _, errs := runCLI("health", "--url", "http://"+none+"/readyz", "--timeout", "1s"); code != 1 || errs == "" {
		t.Errorf("health of nothing: exit %d, stderr %q", code, errs)
	}
}

// TestLogDumpNoSegments: a directory without segments is an error.
func TestLogDumpNoSegments(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "log"), 0o755)
	code, out, errs := runCLI("log", "dump", dir)
	if code != 1 || !strings.Contains(errs, "no segment") || !strings.Contains(errs, filepath.Join(dir, "log")) {
		t.Fatalf("log dump of an empty directory: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if code, _, errs := runCLI("log", "dump", filepath.Join(dir, "nosuch")); code != 1 || errs == "" {
		t.Fatalf("log dump of nothing: exit %d, stderr %q", code, errs)
	}
}

// TestPrintable: text as it is; anything else quoted and escaped.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"hello world":  "hello world",
		"":             "",
		"héllo ✓":      "héllo ✓",
		"a\tb":         `"a\tb"`,
		"a\nb":         `"a\nb"`,
		"\x00\x01\xff": `"\x00\x01\xff"`,
		"\x1b[31mred":  `"\x1b[31mred"`,
		`"quoted"`:     `"\"quoted\""`,
	} {
		if got := printable([]byte(in)); got != want {
			t.Errorf("printable(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestClientCommands runs the client commands against a cluster as a new
// user would.
func TestClientCommands(t *testing.T) {
	c := clustertest.Start(t, 3)
	bs := strings.Join(c.Bootstrap, ",")
	cli := func(args ...string) (int, string, string) {
		t.Helper()
		return runCLI(append(args, "--bootstrap", bs, "--timeout", "20s")...)
	}

	// Flags after the name count; what was created is printed.
	code, out, errs := cli("topic", "create", "orders", "--partitions", "4", "--replication-factor", "3")
	if code != 0 || !strings.Contains(out, "created topic orders: 4 partitions, replication factor 3") {
		t.Fatalf("topic create: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	c.CreateTopic("orders", 4, 3) // waits for leaders (one warm-up record per partition)
	if code, out, _ := cli("topic", "list"); code != 0 || !strings.Contains(out, "orders\t4 partitions") {
		t.Fatalf("topic list: exit %d\n%s", code, out)
	}
	if code, _, errs := cli("topic", "create", "orders"); code != 1 || !strings.Contains(errs, "TOPIC_ALREADY_EXISTS") {
		t.Fatalf("topic create of an existing topic: exit %d\n%s", code, errs)
	}

	// A missing topic is an error, at once.
	for _, args := range [][]string{
		{"consume", "--topic", "nosuch", "--exit"},
		{"consume", "--topic", "nosuch", "--count", "1"},
		{"produce", "--topic", "nosuch"},
		{"topic", "describe", "nosuch"},
		{"topic", "delete", "nosuch"},
		{"partition", "reassign", "--topic", "nosuch", "--partition", "0"},
		{"consume", "--topic", "orders", "--partition", "9", "--exit"},
		{"partition", "reassign", "--topic", "orders", "--partition", "9"},
	} {
		start := time.Now()
		code, _, errs := cli(args...)
		if code != 1 || (!strings.Contains(errs, `unknown topic "nosuch"`) && !strings.Contains(errs, "no partition 9")) {
			t.Errorf("raftlog %s: exit %d\nstderr:\n%s", strings.Join(args, " "), code, errs)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("raftlog %s: took %v", strings.Join(args, " "), d)
		}
	}

	// Records of partition 0: text, and bytes that are not.
	prod := c.Client(kgo.DefaultProduceTopic("orders"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var offsets []int64
	for _, v := range []string{"one", "two", "\x00\x01bin\xff", "four"} {
		r, err := prod.ProduceSync(ctx, &kgo.Record{Partition: 0, Key: []byte("k"), Value: []byte(v)}).First()
		if err != nil {
			t.Fatal(err)
		}
		offsets = append(offsets, r.Offset)
	}
	code, out, errs = cli("consume", "--topic", "orders", "--partition", "0", "--exit")
	if code != 0 || !strings.Contains(out, "\tk\tone\n") || !strings.Contains(out, "\tk\t"+`"\x00\x01bin\xff"`+"\n") {
		t.Fatalf("consume --partition 0 --exit: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	// --from an offset starts there.
	from := strconv.FormatInt(offsets[1], 10)
	code, out, errs = cli("consume", "--topic", "orders", "--partition", "0", "--from", from, "--exit")
	if code != 0 || strings.Contains(out, "\tone\n") || !strings.HasPrefix(out, "0\t"+from+"\tk\ttwo\n") || strings.Count(out, "\n") != 3 {
		t.Fatalf("consume --from %s: exit %d\nstdout:\n%s\nstderr:\n%s", from, code, out, errs)
	}
	code, out, errs = cli("consume", "--topic", "orders", "--partition", "0", "--from", from, "--count", "1")
	if code != 0 || out != "0\t"+from+"\tk\ttwo\n" {
		t.Fatalf("consume --from %s --count 1: exit %d\nstdout:\n%s\nstderr:\n%s", from, code, out, errs)
	}
	// ... which must be in the partition, and of one partition.
	if code, _, errs := cli("consume", "--topic", "orders", "--partition", "0", "--from", "1000", "--exit"); code != 1 || !strings.Contains(errs, "outside partition 0") {
		t.Fatalf("consume --from past the end: exit %d\n%s", code, errs)
	}
	if code, _, errs := cli("consume", "--topic", "orders", "--from", from, "--exit"); code != 2 || !strings.Contains(errs, "--partition") {
		t.Fatalf("consume --from N of 4 partitions: exit %d\n%s", code, errs)
	}
	// From the end, with --exit: nothing, at once.
	if code, out, errs := cli("consume", "--topic", "orders", "--from", "end", "--exit"); code != 0 || out != "" {
		t.Fatalf("consume --from end --exit: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	// Everything, with --exit: the 4 warm-up records and 4 more.
	if code, out, errs := cli("consume", "--topic", "orders", "--exit"); code != 0 || strings.Count(out, "\n") != 8 {
		t.Fatalf("consume --exit: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}

	// Flags are checked before bench creates its topic.
	if code, _, _ := cli("bench", "produce", "--topic", "sizebench", "--size", "-5"); code != 2 {
		t.Fatalf("bench produce --size -5: exit %d, want 2", code)
	}
	if _, out, _ := cli("topic", "list"); strings.Contains(out, "sizebench") {
		t.Fatalf("bench produce --size -5 created its topic:\n%s", out)
	}

	// A refused reassignment says why, once.
	code, out, errs = cli("partition", "reassign", "--topic", "orders", "--partition", "0", "--replicas", "1,2,9")
	if code != 1 || errs == "" {
		t.Fatalf("reassign to a node that does not exist: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if lines := strings.Count(strings.TrimSpace(errs), "\n") + 1; lines != 1 {
		t.Errorf("reassign error on %d lines:\n%s", lines, errs)
	}
	for _, w := range strings.Fields(errs) {
		if len(w) > 8 && strings.Count(errs, w) > 1 && strings.ToUpper(w) == w {
			t.Errorf("reassign error repeats %s:\n%s", w, errs)
		}
	}

	// produce writes what it reads, to the partition asked for.
	var in bytes.Buffer
	in.WriteString("a:1\nb:2\n")
	var pout, perr bytes.Buffer
	if code := runProduce([]string{"--topic", "orders", "--partition", "3", "--key-sep", ":", "--bootstrap", bs}, &in, &pout, &perr); code != 0 || !strings.Contains(perr.String(), "produced 2 records") {
		t.Fatalf("produce: exit %d\n%s", code, perr.String())
	}
	if code, out, errs := cli("consume", "--topic", "orders", "--partition", "3", "--exit"); code != 0 || !strings.Contains(out, "\ta\t1\n") || !strings.Contains(out, "\tb\t2\n") {
		t.Fatalf("consume after produce: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}

	if code, out, errs := cli("topic", "delete", "orders"); code != 0 || !strings.Contains(out, "deleted topic orders") {
		t.Fatalf("topic delete: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}

// devPorts finds a base port whose neighbours at +i, +100+i, +200+i and
// +300+i (i < nodes) are free right now.
func devPorts(t *testing.T, nodes int) int {
	t.Helper()
	// Below the ephemeral range (32768–60999), where an outgoing
	// connection of a test running beside this one could take a port
	// between the two runs of a --dir, and below freeport's [20000, 29000),
	// which those tests draw from.
	for try := 0; try < 200; try++ {
		p := 10000 + rand.IntN(20000-10000-300-nodes)
		ok := true
		for off := 0; off <= 300 && ok; off += 100 {
			for i := 0; i < nodes && ok; i++ {
				l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+off+i))
				if err != nil {
					ok = false
					break
				}
				l.Close()
			}
		}
		if ok {
			return p
		}
	}
	t.Fatal("no free port range")
	return 0
}

var demoOffset = regexp.MustCompile(`(?m)^  partition (\d+) offset (\d+): key-\d = hello from raftlog #\d$`)

// TestDev runs the README's first command: three nodes, the demo topic
// written and read back, then exit. The start and the stop log nothing
// on the console, --exit does not speak of Ctrl-C, a temporary directory
// is removed, and a second run in the same --dir reads back only its own
// records.
func TestDev(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters")
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	code, out, errs := runCLI("dev", "--exit", "--kafka-port", strconv.Itoa(devPorts(t, 3)))
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if n := len(demoOffset.FindAllString(out, -1)); n != 10 {
		t.Fatalf("demo read %d records:\n%s", n, out)
	}
	if !strings.Contains(out, "Bootstrap servers") || strings.Contains(out, "Ctrl-C") {
		t.Fatalf("output of dev --exit:\n%s", out)
	}
	if errs != "" {
		t.Fatalf("a clean start and stop printed on standard error:\n%s", errs)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "raftlog-dev-*")); len(left) > 0 || !strings.Contains(out, "removed "+tmp) {
		t.Fatalf("temporary directory left: %v\n%s", left, out)
	}

	// The nodes of a --dir know each other at its ports: both runs use
	// the same.
	dir := filepath.Join(t.TempDir(), "dev")
	base := devPorts(t, 3)
	last := map[string]int{} // partition → highest offset read by the first run
	for run := 0; run < 2; run++ {
		code, out, errs := runCLI("dev", "--exit", "--dir", dir, "--kafka-port", strconv.Itoa(base))
		if code != 0 || errs != "" || !strings.Contains(out, "kept in "+dir) {
			t.Fatalf("run %d with --dir: exit %d\nstdout:\n%s\nstderr:\n%s", run, code, out, errs)
		}
		recs := demoOffset.FindAllStringSubmatch(out, -1)
		if len(recs) != 10 {
			t.Fatalf("run %d: demo read %d records:\n%s", run, len(recs), out)
		}
		for _, m := range recs {
			off, _ := strconv.Atoi(m[2])
			if run == 0 {
				last[m[1]] = max(last[m[1]], off)
			} else if off <= last[m[1]] {
				t.Fatalf("the second run read offset %d of partition %s, written by the first:\n%s", off, m[1], out)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "raftlog.log")); err != nil {
		t.Fatalf("no log of the nodes in --dir: %v", err)
	}
	// Other ports for that directory are refused, before any node starts.
	if code, _, errs := runCLI("dev", "--exit", "--dir", dir, "--kafka-port", strconv.Itoa(base+1)); code != 2 || !strings.Contains(errs, "--kafka-port "+strconv.Itoa(base)) {
		t.Fatalf("dev --dir of other ports: exit %d\n%s", code, errs)
	}
}
