package node_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/raftlog/raftlog/cluster/clustertest"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// tally counts what a group's members consume, by record value.
type tally struct {
	mu     sync.Mutex
	counts map[int]int
}

func (tl *tally) add(value []byte) {
	v, err := strconv.Atoi(string(value))
	if err != nil {
		return // a warm-up record
	}
	tl.mu.Lock()
	tl.counts[v]++
	tl.mu.Unlock()
}

// covers reports whether every value in [from, to) was consumed.
func (tl *tally) covers(from, to int) bool {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for v := from; v < to; v++ {
		if tl.counts[v] == 0 {
			return false
		}
	}
	return true
}

// redelivered lists values below to consumed more than once.
func (tl *tally) redelivered(to int) []int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var out []int
	for v := 0; v < to; v++ {
		if tl.counts[v] > 1 {
			out = append(out, v)
		}
	}
	return out
}

func produceInts(t *testing.T, c *clustertest.Cluster, topic string, from, to int) {
	t.Helper()
	prod := c.Client(kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for v := from; v < to; v++ {
		recs = append(recs, &kgo.Record{Value: []byte(strconv.Itoa(v))})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// waitGroupAtEnd waits until the group's committed offsets reach the end
// of every partition of topic.
func waitGroupAtEnd(t *testing.T, c *clustertest.Cluster, group, topic string) {
	t.Helper()
	adm := kadm.NewClient(c.Client())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clustertest.Eventually(t, 60*time.Second, func() error {
		// Asked again each time: an election (on a loaded machine) makes
		// a partition answer LEADER_NOT_AVAILABLE for a moment.
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return err
		}
		fetched, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return err
		}
		var behind error
		ends.Each(func(o kadm.ListedOffset) {
			if cm, ok := fetched.Lookup(topic, o.Partition); !ok || cm.At != o.Offset {
				behind = fmt.Errorf("group %s: %s/%d committed %d, end %d", group, topic, o.Partition, cm.At, o.Offset)
			}
		})
		return behind
	})
}

func waitTally(t *testing.T, tl *tally, from, to int) {
	t.Helper()
	clustertest.Eventually(t, 60*time.Second, func() error {
		if !tl.covers(from, to) {
			return fmt.Errorf("values %d..%d not all consumed", from, to)
		}
		return nil
	})
}

type saramaMember struct{ tl *tally }

func (saramaMember) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (saramaMember) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h saramaMember) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		h.tl.add(m.Value)
		sess.MarkMessage(m, "")
	}
	return nil
}

// runSarama runs members sarama group members until stop is called.
func runSarama(t *testing.T, c *clustertest.Cluster, group, topic string, members int, tl *tally) (stop func()) {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	cfg.Consumer.Group.Heartbeat.Interval = 200 * time.Millisecond
	cfg.Consumer.Group.Session.Timeout = 10 * time.Second
	cfg.Consumer.MaxWaitTime = 100 * time.Millisecond
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range members {
		cg, err := sarama.NewConsumerGroup(c.Bootstrap, group, cfg)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cg.Close()
			for ctx.Err() == nil {
				if err := cg.Consume(ctx, []string{topic}, saramaMember{tl}); err != nil && ctx.Err() == nil {
					t.Logf("sarama consume: %v", err)
				}
			}
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// runKafkaGo runs members kafka-go Readers of group until stop is called.
func runKafkaGo(c *clustertest.Cluster, group, topic string, members int, tl *tally) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range members {
		r := kafkago.NewReader(kafkago.ReaderConfig{
			Brokers: c.Bootstrap, GroupID: group, Topic: topic,
			MaxWait: 100 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond,
			SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second,
			CommitInterval: 100 * time.Millisecond, StartOffset: kafkago.FirstOffset,
			JoinGroupBackoff: 100 * time.Millisecond,
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			for {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					return
				}
				tl.add(m.Value)
			}
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// TestSaramaAndKafkaGoGroupsOnCluster: an IBM/sarama ConsumerGroup and
// segmentio/kafka-go Readers with a GroupID, each group two members on a
// 6-partition RF 3 topic of a 3-node cluster, consume every record and
// commit to the end; a later generation of each group, after more records
// are produced, resumes at the committed offsets: it reads the new records
// and none of the old.
func TestSaramaAndKafkaGoGroupsOnCluster(t *testing.T) {
	c := clustertest.Start(t, 3)
	const topic, first, second = "clients-grp", 600, 300
	c.CreateTopic(topic, 6, 3)
	produceInts(t, c, topic, 0, first)
	for _, client := range []struct {
		name string
		run  func(group string, tl *tally) func()
	}{
		{"sarama", func(group string, tl *tally) func() { return runSarama(t, c, group, topic, 2, tl) }},
		{"kafka-go", func(group string, tl *tally) func() { return runKafkaGo(c, group, topic, 2, tl) }},
	} {
		group := client.name + "-group"
		tl := &tally{counts: map[int]int{}}
		stop := client.run(group, tl)
		waitTally(t, tl, 0, first)
		waitGroupAtEnd(t, c, group, topic)
		stop()
		if r := tl.redelivered(first); len(r) > 0 {
			t.Logf("%s: %d values consumed twice in the first generation (rebalance before a commit)", client.name, len(r))
		}
		// The next generation starts from the commits.
		from := first + second*map[string]int{"sarama": 0, "kafka-go": 1}[client.name]
		produceInts(t, c, topic, from, from+second)
		next := &tally{counts: map[int]int{}}
		stop = client.run(group, next)
		waitTally(t, next, from, from+second)
		waitGroupAtEnd(t, c, group, topic)
		stop()
		for v := 0; v < from; v++ {
			if next.counts[v] > 0 {
				t.Fatalf("%s: the second generation re-read value %d, committed before it started", client.name, v)
			}
		}
		t.Logf("%s: a second generation read values %d..%d and nothing committed before", client.name, from, from+second-1)
	}
}
