// Package bench drives a Kafka cluster with franz-go (kgo) and measures it:
// produce and consume throughput, per-record acknowledgement latency and
// end-to-end latency. It knows nothing of raftlog: the same code measures
// raftlog, franz-go's kfake or any Kafka broker, so the figures compare.
//
// Every run is bounded by a duration and a record count and stops by
// itself.
package bench

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Config says what to run against and how much.
type Config struct {
	Bootstrap   []string      // seed brokers
	Topic       string        // created when missing (see EnsureTopic)
	Partitions  int32         // partitions of a topic created here
	Replication int16         // replicas of a topic created here (-1: the broker's default)
	Size        int           // bytes of each record value
	Duration    time.Duration // the run stops after this long
	Warmup      time.Duration // a produce first runs this long on the same clients, unmeasured
	Records     int64         // ... or after this many records (0: no count bound)
	Acks        Acks          // produce acknowledgements
	Producers   int           // kgo clients producing at once (each its own connections)
	Rate        float64       // records per second over all producers (0: as fast as acknowledged)
	Compression string        // produce codec: none (the zero value), gzip, snappy, lz4, zstd
	Linger      time.Duration // how long a partition's batch waits for more records (0: kgo's default, 10 ms; <0: none)

	// FromEnd makes a consume start at the end of each partition and wait
	// for new records (whose values carry the producer's clock, so the
	// end-to-end latency is measured) instead of reading from the start up
	// to the end offsets seen when it starts.
	FromEnd bool

	// Timeline makes a produce keep the worst latency of every
	// TimelineStep (Result.Timeline).
	Timeline bool

	// Progress, when set, is called about ten times a second with the
	// records and value bytes done so far. It must not block.
	Progress func(records, bytes int64)

	// ClientOpts are added to every kgo client's options (last, so they win).
	ClientOpts []kgo.Opt
}

// Acks is a produce acknowledgement level: -1 (all in-sync replicas), 1
// (the leader) or 0 (none).
type Acks int16

// ParseAcks reads "all", "-1", "1", "leader", "0" or "none".
func ParseAcks(s string) (Acks, error) {
	switch strings.ToLower(s) {
	case "all", "-1":
		return -1, nil
	case "1", "leader":
		return 1, nil
	case "0", "none":
		return 0, nil
	}
	return 0, fmt.Errorf("acks %q: want all, 1 or 0", s)
}

func (a Acks) String() string {
	if a == -1 {
		return "all"
	}
	return fmt.Sprint(int16(a))
}

func (a Acks) opts() []kgo.Opt {
	switch a {
	case 0:
		return []kgo.Opt{kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite()}
	case 1:
		return []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()}
	}
	return []kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks())}
}

// Limits on a run, so that a typo cannot start an endless one.
const (
	MaxDuration = 24 * time.Hour
	MaxSize     = 1 << 20 // kgo's default largest batch
	MaxClients  = 64
)

func compression(name string) (kgo.CompressionCodec, error) {
	switch strings.ToLower(name) {
	case "", "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("compression %q: want none, gzip, snappy, lz4 or zstd", name)
}

// Check says what is wrong with c for a produce (or a consume), before
// anything is run.
func (c *Config) Check(produce bool) error { return c.check(produce) }

func (c *Config) check(produce bool) error {
	switch {
	case len(c.Bootstrap) == 0:
		return errors.New("no bootstrap brokers")
	case c.Topic == "":
		return errors.New("no topic")
	case c.Duration <= 0 || c.Duration > MaxDuration:
		return fmt.Errorf("duration %v: want more than 0 and at most %v", c.Duration, MaxDuration)
	case c.Records < 0:
		return fmt.Errorf("records %d: want 0 (no count bound) or more", c.Records)
	}
	if !produce {
		return nil
	}
	switch {
	case c.Size < 0 || c.Size > MaxSize:
		return fmt.Errorf("size %d: want 0..%d", c.Size, MaxSize)
	case c.Producers < 1 || c.Producers > MaxClients:
		return fmt.Errorf("producers %d: want 1..%d", c.Producers, MaxClients)
	case c.Rate < 0:
		return fmt.Errorf("rate %v: want 0 (unlimited) or more", c.Rate)
	case c.Warmup < 0 || c.Warmup > MaxDuration:
		return fmt.Errorf("warm-up %v: want 0 to %v", c.Warmup, MaxDuration)
	case c.Acks != -1 && c.Acks != 0 && c.Acks != 1:
		return fmt.Errorf("acks %d: want -1, 0 or 1", c.Acks)
	}
	_, err := compression(c.Compression)
	return err
}

func (c *Config) client(opts ...kgo.Opt) (*kgo.Client, error) {
	all := append([]kgo.Opt{kgo.SeedBrokers(c.Bootstrap...)}, opts...)
	return kgo.NewClient(append(all, c.ClientOpts...)...)
}
