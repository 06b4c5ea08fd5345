package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/raftlog/raftlog/cluster/clustertest"
	"github.com/raftlog/raftlog/replication"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSarama: IBM/sarama's sync producer and partition consumer.
func TestSarama(t *testing.T) {
	c := clustertest.Start(t, 3)
	c.CreateTopic("sarama", 2, 3)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Retry.Max = 50
	cfg.Producer.Retry.Backoff = 100 * time.Millisecond
	cfg.Metadata.Retry.Max = 50
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	prod, err := sarama.NewSyncProducer(c.Bootstrap, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const n = 200
	for i := 0; i < n; i++ {
		if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: "sarama", Partition: int32(i % 2),
			Key: sarama.StringEncoder(fmt.Sprintf("k%d", i)), Value: sarama.StringEncoder(fmt.Sprintf("v%d", i))}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	consumer, err := sarama.NewConsumer(c.Bootstrap, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	got := 0
	for p := int32(0); p < 2; p++ {
		pc, err := consumer.ConsumePartition("sarama", p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.After(60 * time.Second)
		for want := n / 2; want > 0; {
			select {
			case m := <-pc.Messages():
				if string(m.Value) == "warmup" {
					continue
				}
				got++
				want--
			case err := <-pc.Errors():
				t.Fatalf("partition %d: %v", p, err)
			case <-deadline:
				t.Fatalf("partition %d: %d records missing", p, want)
			}
		}
		pc.Close()
	}
	if got != n {
		t.Fatalf("consumed %d of %d", got, n)
	}
}

// TestKafkaGo: segmentio/kafka-go's Writer and Reader (no groups), on a
// partition whose records are separated by the control batches of two
// elections (Raft's no-op and barrier, handed to consumers as one empty
// batch per run: more than one in a row between records made kafka-go's
// reader panic).
func TestKafkaGo(t *testing.T) {
	c := clustertest.Start(t, 3)
	c.CreateTopic("kgo-seg", 1, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	w := &kafkago.Writer{Addr: kafkago.TCP(c.Bootstrap...), Topic: "kgo-seg", RequiredAcks: kafkago.RequireAll,
		MaxAttempts: 50, BatchTimeout: 5 * time.Millisecond}
	defer w.Close()
	const per = 50
	write := func(from int) {
		var msgs []kafkago.Message
		for i := from; i < from+per; i++ {
			msgs = append(msgs, kafkago.Message{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("v%03d", i))})
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	leader := func() *replication.Replica {
		for _, nd := range c.Nodes {
			if r, ok := nd.Replica("kgo-seg", 0); ok && r.IsLeader() {
				return r
			}
		}
		return nil
	}
	write(0)
	for round := 0; round < 2; round++ {
		old := leader()
		if old == nil {
			t.Fatal("no leader")
		}
		if err := old.TransferLeadership("", ""); err != nil {
			t.Fatalf("leadership transfer: %v", err)
		}
		clustertest.Eventually(t, 30*time.Second, func() error {
			if l := leader(); l == nil || l == old {
				return errors.New("no new leader after the transfer")
			}
			return nil
		})
	}
	write(per)
	readKafkaGo(ctx, t, c, "kgo-seg", 2*per)
}

// readKafkaGo reads partition 0 of topic with kafka-go's Reader from the
// start and checks that it holds the values v000, v001, ... up to n
// (besides the warm-up records).
func readKafkaGo(ctx context.Context, t *testing.T, c *clustertest.Cluster, topic string, n int) {
	t.Helper()
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: c.Bootstrap, Topic: topic, Partition: 0, MaxWait: 200 * time.Millisecond})
	defer r.Close()
	for got := 0; got < n; {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read after %d: %v", got, err)
		}
		if string(m.Value) == "warmup" {
			continue
		}
		if want := fmt.Sprintf("v%03d", got); string(m.Value) != want {
			t.Fatalf("record %d is %q, want %s", got, m.Value, want)
		}
		got++
	}
}

// TestKcat: librdkafka through kcat, from the shell: produce, then
// consume. kcat comes from Debian's package; .ci/run installs it.
func TestKcat(t *testing.T) {
	path, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("kcat is not installed (CI must install it: apt-get install kcat)")
		}
		t.Skip("kcat not installed")
	}
	c := clustertest.Start(t, 3)
	c.CreateTopic("kcat", 1, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var in bytes.Buffer
	for i := 0; i < 50; i++ {
		fmt.Fprintf(&in, "line-%02d\n", i)
	}
	prod := exec.CommandContext(ctx, path, "-b", strings.Join(c.Bootstrap, ","), "-t", "kcat", "-P", "-X", "acks=all")
	prod.Stdin = &in
	if out, err := prod.CombinedOutput(); err != nil {
		t.Fatalf("kcat produce: %v\n%s", err, out)
	}
	cons := exec.CommandContext(ctx, path, "-b", strings.Join(c.Bootstrap, ","), "-t", "kcat", "-C", "-e", "-o", "beginning", "-f", "%s\n")
	out, err := cons.Output()
	if err != nil {
		t.Fatalf("kcat consume: %v\n%s", err, out)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "warmup" {
			lines = append(lines, l)
		}
	}
	if len(lines) != 50 || lines[0] != "line-00" || lines[49] != "line-49" {
		t.Fatalf("kcat read %d lines: %q", len(lines), lines)
	}
	// Offsets as Kafka has them: the harness's warm-up record at 0, then
	// the lines at 1 to 50, so -o 2 starts at the second line.
	from := exec.CommandContext(ctx, path, "-b", strings.Join(c.Bootstrap, ","), "-t", "kcat", "-C", "-e", "-o", "2", "-f", "%o %s\n")
	out, err = from.Output()
	if err != nil {
		t.Fatalf("kcat -o 2: %v\n%s", err, out)
	}
	if got := strings.Split(strings.TrimSpace(string(out)), "\n"); len(got) != 49 || got[0] != "2 line-01" || got[48] != "50 line-49" {
		t.Fatalf("kcat -o 2 read %d records, first %q", len(got), got[0])
	}
	// Control batches at the end of the log (a DeleteRecords entry, Raft's
	// own) must not keep a consumer from reaching the end: kcat -e exits.
	adm := kadm.NewClient(c.Client())
	ends, err := adm.ListEndOffsets(ctx, "kcat")
	if err != nil {
		t.Fatal(err)
	}
	e, _ := ends.Lookup("kcat", 0)
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: "kcat", Partition: 0, At: e.Offset - 10})
	if _, err := adm.DeleteRecords(ctx, os); err != nil {
		t.Fatal(err)
	}
	tail := exec.CommandContext(ctx, path, "-b", strings.Join(c.Bootstrap, ","), "-t", "kcat", "-C", "-e", "-o", "beginning", "-f", "%s\n")
	out, err = tail.Output()
	if err != nil {
		t.Fatalf("kcat after DeleteRecords: %v\n%s", err, out)
	}
	if got := strings.Count(string(out), "line-"); got != 10 {
		t.Fatalf("kcat read %d records after DeleteRecords, want the last 10:\n%s", got, out)
	}
	meta, err := exec.CommandContext(ctx, path, "-b", c.Bootstrap[0], "-L").CombinedOutput()
	if err != nil || !strings.Contains(string(meta), "3 brokers") {
		t.Fatalf("kcat -L: %v\n%s", err, meta)
	}
}

// TestCompressionCodecs: batches are stored as the producer sent them,
// whatever the codec, and read back by the consumer.
func TestCompressionCodecs(t *testing.T) {
	c := clustertest.Start(t, 3)
	codecs := map[string]kgo.CompressionCodec{
		"gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for name, codec := range codecs {
		topic := "z-" + name
		c.CreateTopic(topic, 1, 3)
		prod := c.Client(kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(5*time.Millisecond))
		var rs []*kgo.Record
		for i := 0; i < 500; i++ {
			rs = append(rs, &kgo.Record{Value: []byte(fmt.Sprintf("%s-%04d-%s", name, i, strings.Repeat("x", 100)))})
		}
		if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cons := c.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		got := clustertest.ConsumeAll(t, cons, 500, 60*time.Second)
		if len(got[0]) != 500 || !strings.HasPrefix(string(got[0][499].Value), fmt.Sprintf("%s-0499", name)) {
			t.Fatalf("%s: read %d records", name, len(got[0]))
		}
	}
}
