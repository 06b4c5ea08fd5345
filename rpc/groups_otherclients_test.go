package rpc

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
)

// saramaHandler records what a sarama group member consumes.
type saramaHandler struct {
	sn       *seen
	name     string
	mu       sync.Mutex
	sessions int
}

func (h *saramaHandler) Setup(sarama.ConsumerGroupSession) error {
	h.mu.Lock()
	h.sessions++
	h.mu.Unlock()
	return nil
}

func (h *saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *saramaHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		v, err := strconv.Atoi(string(m.Value))
		if err != nil {
			panic(err)
		}
		h.sn.mu.Lock()
		h.sn.counts[v]++
		h.sn.by[v] = h.name
		h.sn.mu.Unlock()
		sess.MarkMessage(m, "")
	}
	return nil
}

// waitCommittedToEnd waits for a group's committed offsets to reach the
// end of every partition of topic.
func waitCommittedToEnd(t *testing.T, addr, group, topic string) {
	t.Helper()
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, addr))
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the commits to reach the end offsets", func() bool {
		fetched, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return false
		}
		done := true
		ends.Each(func(o kadm.ListedOffset) {
			if c, ok := fetched.Lookup(topic, o.Partition); !ok || c.At != o.Offset {
				done = false
			}
		})
		return done
	})
}

// TestSaramaConsumerGroup: two IBM/sarama consumer group members, at an
// old protocol version and a recent one, share a topic and commit.
func TestSaramaConsumerGroup(t *testing.T) {
	for _, v := range []sarama.KafkaVersion{sarama.V1_0_0_0, sarama.V3_6_0_0} {
		t.Run(v.String(), func(t *testing.T) {
			const (
				topic = "sarama"
				group = "sarama-group"
				n     = 600
			)
			_, _, addr := startGroupServer(t, topic, 4)
			produceValues(t, addr, topic, 0, n)
			cfg := sarama.NewConfig()
			cfg.Version = v
			cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
			cfg.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
			cfg.Consumer.Group.Heartbeat.Interval = 100 * time.Millisecond
			cfg.Consumer.Group.Session.Timeout = 10 * time.Second
			cfg.Consumer.MaxWaitTime = 100 * time.Millisecond
			cfg.Metadata.Retry.Backoff = 50 * time.Millisecond
			sn := newSeen()
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			var handlers []*saramaHandler
			for i := range 2 {
				cg, err := sarama.NewConsumerGroup([]string{addr}, group, cfg)
				if err != nil {
					t.Fatal(err)
				}
				h := &saramaHandler{sn: sn, name: "sarama-" + strconv.Itoa(i)}
				handlers = append(handlers, h)
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer cg.Close()
					for ctx.Err() == nil {
						if err := cg.Consume(ctx, []string{topic}, h); err != nil && ctx.Err() == nil {
							t.Logf("consume: %v", err)
						}
					}
				}()
			}
			defer func() { cancel(); wg.Wait() }()
			waitFor(t, "every record consumed", func() bool { return sn.all(n) })
			waitCommittedToEnd(t, addr, group, topic)
			described, err := kadm.NewClient(newClient(t, addr)).DescribeGroups(testCtx(t), group)
			if err != nil {
				t.Fatal(err)
			}
			if g := described[group]; g.State != "Stable" || len(g.Members) != 2 || g.Protocol != "range" {
				t.Fatalf("described: %+v", g)
			}
		})
	}
}

// TestKafkaGoConsumerGroup: segmentio/kafka-go Readers of one group (old
// protocol versions) share a topic and commit.
func TestKafkaGoConsumerGroup(t *testing.T) {
	const (
		topic = "kafkago"
		group = "kafkago-group"
		n     = 300
	)
	_, _, addr := startGroupServer(t, topic, 2)
	produceValues(t, addr, topic, 0, n)
	sn := newSeen()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 2 {
		r := kafkago.NewReader(kafkago.ReaderConfig{
			Brokers:           []string{addr},
			GroupID:           group,
			Topic:             topic,
			MaxWait:           100 * time.Millisecond,
			HeartbeatInterval: 100 * time.Millisecond,
			SessionTimeout:    10 * time.Second,
			RebalanceTimeout:  10 * time.Second,
			CommitInterval:    100 * time.Millisecond,
			StartOffset:       kafkago.FirstOffset,
			JoinGroupBackoff:  100 * time.Millisecond,
		})
		name := "kafkago-" + strconv.Itoa(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			for {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					return
				}
				v, err := strconv.Atoi(string(m.Value))
				if err != nil {
					panic(err)
				}
				sn.mu.Lock()
				sn.counts[v]++
				sn.by[v] = name
				sn.mu.Unlock()
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	waitFor(t, "every record consumed", func() bool { return sn.all(n) })
	waitCommittedToEnd(t, addr, group, topic)
}
