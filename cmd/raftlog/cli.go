package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// What every subcommand shares: its flag set, parsed with flags anywhere
// among the arguments, its usage, and (client commands) how to reach the
// cluster.

// command is the flag set of one subcommand.
type command struct {
	*flag.FlagSet
	name  string // as typed after raftlog: "topic create"
	args  string // the synopsis after the flags: "NAME"
	about string // one paragraph: what it does
}

func newCommand(name, args, about string) *command {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and usage are printed by parse
	fs.Usage = func() {}
	return &command{FlagSet: fs, name: name, args: args, about: about}
}

// usage prints the synopsis, what the command does and its flags.
func (c *command) usage(w io.Writer) {
	fmt.Fprintf(w, "usage: raftlog %s", c.name)
	n := 0
	c.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprint(w, " [flags]")
	}
	if c.args != "" {
		fmt.Fprint(w, " "+c.args)
	}
	fmt.Fprintln(w)
	if c.about != "" {
		fmt.Fprintf(w, "\n%s\n", c.about)
	}
	if n > 0 {
		fmt.Fprintln(w, "\nflags (-flag and --flag are the same; flags may come before or after the arguments, -- ends them):")
		c.SetOutput(w)
		c.PrintDefaults()
		c.SetOutput(io.Discard)
	}
}

// fail prints what is wrong with the command line and where to look, and
// returns the exit status of a usage error.
func (c *command) fail(stderr io.Writer, format string, a ...any) int {
	fmt.Fprintf(stderr, "raftlog %s: %s\n", c.name, fmt.Sprintf(format, a...))
	fmt.Fprintf(stderr, "Run 'raftlog %s -h' for usage.\n", c.name)
	return 2
}

// parse parses args, flags and positional arguments in any order ("--"
// ends the flags). ok is false when the command must return code: 0
// after -h (usage on stdout), 2 after a bad flag (said on stderr).
func (c *command) parse(args []string, stdout, stderr io.Writer) (pos []string, code int, ok bool) {
	var flags []string
	help := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		f := c.Lookup(name)
		if f == nil && (name == "h" || name == "help") {
			help = true
			continue
		}
		flags = append(flags, a)
		if f == nil || hasValue || isBoolFlag(f) {
			continue
		}
		if i+1 < len(args) { // the flag's value, whatever it looks like
			i++
			flags = append(flags, args[i])
		}
	}
	if help {
		c.usage(stdout)
		return nil, 0, false
	}
	if err := c.Parse(flags); err != nil {
		return nil, c.fail(stderr, "%v", err), false
	}
	return append(pos, c.Args()...), 0, true
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// noArgs refuses positional arguments.
func (c *command) noArgs(pos []string, stderr io.Writer) (int, bool) {
	if len(pos) > 0 {
		return c.fail(stderr, "unexpected argument%s %s", plural(len(pos)), strings.Join(pos, " ")), false
	}
	return 0, true
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// clientFlags are the flags of every command that speaks the Kafka
// protocol to the cluster.
type clientFlags struct {
	bootstrap *string
	timeout   *time.Duration
}

func addClientFlags(c *command, timeout time.Duration, timeoutUsage string) clientFlags {
	return clientFlags{
		bootstrap: c.String("bootstrap", envOr("RAFTLOG_BOOTSTRAP", "127.0.0.1:9092"), "comma-separated Kafka addresses of any nodes (RAFTLOG_BOOTSTRAP)"),
		timeout:   c.Duration("timeout", timeout, timeoutUsage),
	}
}

// check validates the flags (before anything is done).
func (f clientFlags) check(c *command, stderr io.Writer) (int, bool) {
	if len(f.seeds()) == 0 {
		return c.fail(stderr, "--bootstrap names no address"), false
	}
	if *f.timeout <= 0 {
		return c.fail(stderr, "--timeout %v: want more than 0", *f.timeout), false
	}
	return 0, true
}

func (f clientFlags) seeds() []string {
	var out []string
	for _, s := range strings.Split(*f.bootstrap, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// clients counts the clients connect made.
var clients atomic.Int64

// connect makes a client and checks, within ctx, that a broker answers:
// an unreachable cluster is an error at once, not a silent wait.
func (f clientFlags) connect(ctx context.Context, opts ...kgo.Opt) (*kgo.Client, error) {
	// A client id of its own: a CreateTopics the cluster sees again from
	// the same client id and host within a minute counts as a retry of
	// the first (it succeeds as the first did), and a command run twice
	// must hear that the topic exists.
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(f.seeds()...), kgo.ClientID(fmt.Sprintf("raftlog-%d-%d", os.Getpid(), clients.Add(1)))}, opts...)...)
	if err != nil {
		return nil, err
	}
	wait := *f.timeout
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl).Round(time.Millisecond)
	}
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %v", wait)
		}
		return nil, fmt.Errorf("cannot reach a broker at %s: %w", *f.bootstrap, err)
	}
	return cl, nil
}

// describeTopic returns the metadata of topic, or an error naming the
// topic when it does not exist.
func describeTopic(ctx context.Context, adm *kadm.Client, topic string) (kadm.TopicDetail, error) {
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return kadm.TopicDetail{}, err
	}
	t, ok := td[topic]
	switch {
	case !ok || errors.Is(t.Err, kerr.UnknownTopicOrPartition):
		return t, fmt.Errorf("unknown topic %q (raftlog topic list shows the topics)", topic)
	case t.Err != nil:
		return t, fmt.Errorf("topic %s: %w", topic, t.Err)
	}
	return t, nil
}

// timeoutErr words an error of a request cut short by --timeout.
func timeoutErr(err error, timeout time.Duration) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within --timeout %v", timeout)
	}
	return err
}

// kafkaErr is err with the broker's message (msg, or the one kadm
// carries in err), each said once: a broker may start its message with
// the text of the error code, which kadm puts in front again.
func kafkaErr(err error, msg string) error {
	if err == nil {
		return nil
	}
	var em *kadm.ErrAndMessage
	if msg == "" && errors.As(err, &em) {
		err, msg = em.Err, em.ErrMessage
	}
	text := err.Error()
	var ke *kerr.Error
	if errors.As(err, &ke) {
		text = ke.Message + ": " + ke.Description
		for _, prefix := range []string{text, ke.Message, ke.Description} {
			for strings.HasPrefix(msg, prefix) {
				msg = strings.TrimLeft(strings.TrimPrefix(msg, prefix), ": ")
			}
		}
	}
	if msg == "" || strings.Contains(text, msg) {
		return fmt.Errorf("%w", err)
	}
	return fmt.Errorf("%s: %s", text, msg)
}
