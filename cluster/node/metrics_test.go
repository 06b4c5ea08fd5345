package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/raftlog/raftlog/cluster/clustertest"
	"github.com/raftlog/raftlog/cluster/clustertest/promtest"
	"github.com/raftlog/raftlog/log"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// checkClusterMetrics checks the scrapes of every node of a cluster
// holding topic with partitions partitions, replicated on every node.
func checkClusterMetrics(all []map[string]*dto.MetricFamily, topic string, partitions int) error {
	perPartition := []string{
		"raftlog_partition_log_start_offset", "raftlog_partition_log_end_offset", "raftlog_partition_high_watermark",
		"raftlog_partition_log_size_bytes", "raftlog_partition_log_segments", "raftlog_partition_raft_term",
		"raftlog_partition_leader", "raftlog_partition_gated", "raftlog_partition_commit_lag",
		"raftlog_partition_recovery_duration_seconds", "raftlog_partition_recovery_truncated_bytes",
		"raftlog_partition_producer_ids", "raftlog_partition_producer_ids_forgotten_total",
	}
	perNode := []string{
		"raftlog_node_info", "raftlog_node_ready", "raftlog_node_replicas", "raftlog_node_partitions_led",
		"raftlog_node_under_replicated_partitions", "raftlog_node_gated_replicas", "raftlog_node_controller_leader",
		"raftlog_node_live_brokers", "raftlog_node_offset_groups",
		"raftlog_node_controller_log_start_offset", "raftlog_node_controller_log_end_offset",
		"raftlog_node_raft_direct_connections", "raftlog_node_quiesced_replicas", "raftlog_node_partitions_awaiting_peers",
		// The standard collectors.
		"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes",
		"process_open_fds",
	}
	var led, controllers, direct float64
	leaders := make([]int, partitions)
	for i, fams := range all {
		id := i + 1
		for _, name := range perNode {
			if _, ok := promtest.GaugeValue(fams, name, nil); !ok {
				return fmt.Errorf("node %d: no %s", id, name)
			}
		}
		if v, _ := promtest.GaugeValue(fams, "raftlog_node_info", map[string]string{"node_id": strconv.Itoa(id)}); v != 1 {
			return fmt.Errorf("node %d: raftlog_node_info names another node", id)
		}
		if v, _ := promtest.GaugeValue(fams, "raftlog_node_replicas", nil); v != float64(partitions) {
			return fmt.Errorf("node %d: %v replicas, want %d", id, v, partitions)
		}
		for _, name := range []string{"raftlog_node_under_replicated_partitions", "raftlog_node_gated_replicas"} {
			if v, _ := promtest.GaugeValue(fams, name, nil); v != 0 {
				return fmt.Errorf("node %d: %s = %v, want 0", id, name, v)
			}
		}
		if v, _ := promtest.GaugeValue(fams, "raftlog_node_live_brokers", nil); v != 3 {
			return fmt.Errorf("node %d: %v live brokers, want 3", id, v)
		}
		v, _ := promtest.GaugeValue(fams, "raftlog_node_partitions_led", nil)
		led += v
		v, _ = promtest.GaugeValue(fams, "raftlog_node_controller_leader", nil)
		controllers += v
		v, _ = promtest.GaugeValue(fams, "raftlog_node_raft_direct_connections", nil)
		direct += v
		for p := 0; p < partitions; p++ {
			lbl := map[string]string{"topic": topic, "partition": strconv.Itoa(p)}
			val := map[string]float64{}
			for _, name := range perPartition {
				v, ok := promtest.GaugeValue(fams, name, lbl)
				if !ok {
					return fmt.Errorf("node %d: no %s%v", id, name, lbl)
				}
				val[name] = v
			}
			start, end, hw := val["raftlog_partition_log_start_offset"], val["raftlog_partition_log_end_offset"], val["raftlog_partition_high_watermark"]
			if start > hw || hw > end {
				return fmt.Errorf("node %d %s/%d: start %v, high watermark %v, end %v out of order", id, topic, p, start, hw, end)
			}
			if lag := val["raftlog_partition_commit_lag"]; lag != 0 {
				return fmt.Errorf("node %d %s/%d: commit lag %v on an idle partition", id, topic, p, lag)
			}
			if val["raftlog_partition_log_segments"] < 1 || val["raftlog_partition_log_size_bytes"] <= 0 || val["raftlog_partition_raft_term"] < 1 {
				return fmt.Errorf("node %d %s/%d: segments %v, size %v, term %v", id, topic, p,
					val["raftlog_partition_log_segments"], val["raftlog_partition_log_size_bytes"], val["raftlog_partition_raft_term"])
			}
			if val["raftlog_partition_gated"] != 0 || val["raftlog_partition_recovery_truncated_bytes"] != 0 || val["raftlog_partition_recovery_duration_seconds"] < 0 {
				return fmt.Errorf("node %d %s/%d: gated %v, truncated %v, recovery %vs", id, topic, p, val["raftlog_partition_gated"],
					val["raftlog_partition_recovery_truncated_bytes"], val["raftlog_partition_recovery_duration_seconds"])
			}
			if val["raftlog_partition_leader"] == 1 {
				leaders[p]++
				if hw <= 0 {
					return fmt.Errorf("node %d leads %s/%d with high watermark %v", id, topic, p, hw)
				}
			}
		}
	}
	if led != float64(partitions) {
		return fmt.Errorf("partitions led summed over the nodes: %v, want %d", led, partitions)
	}
	for p, n := range leaders {
		if n != 1 {
			return fmt.Errorf("%s/%d: %d nodes report leading it", topic, p, n)
		}
	}
	if controllers != 1 {
		return fmt.Errorf("%v nodes lead the controller", controllers)
	}
	// Every leader replicates to its followers on direct connections.
	if direct == 0 {
		return errors.New("no node holds a direct connection")
	}
	return nil
}

// TestMetrics: /metrics of each node of a 3-node cluster.
func TestMetrics(t *testing.T) {
	c := clustertest.Start(t, 3)
	const topic, partitions = "obs", 3
	c.CreateTopic(topic, partitions, 3)
	c.Produce(topic, 20)
	var addrs []string
	for _, nd := range c.Nodes {
		addrs = append(addrs, nd.HTTPAddr())
	}

	clustertest.Eventually(t, 20*time.Second, func() error {
		var all []map[string]*dto.MetricFamily
		for _, a := range addrs {
			all = append(all, promtest.Scrape(t, a))
		}
		if err := checkClusterMetrics(all, topic, partitions); err != nil {
			return err
		}
		return checkRaftMetrics(all[0])
	})
}

// checkRaftMetrics checks that what Raft measures of itself is there:
// commit time, and the replication round trip labelled by peer, without
// the copies raft names per peer.
func checkRaftMetrics(fams map[string]*dto.MetricFamily) error {
	for _, name := range []string{"raft_commitTime", "raft_replication_appendEntries_rpc", "raft_rpc_appendEntries_storeLogs"} {
		f, ok := fams[name]
		if !ok || f.GetType() != dto.MetricType_HISTOGRAM || len(f.GetMetric()) == 0 {
			return fmt.Errorf("no histogram %s", name)
		}
		if h := f.GetMetric()[0].GetHistogram(); h.GetSampleCount() == 0 {
			return fmt.Errorf("%s: no samples", name)
		}
	}
	for _, m := range fams["raft_replication_appendEntries_rpc"].GetMetric() {
		if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != "peer_id" {
			return fmt.Errorf("raft_replication_appendEntries_rpc labels %v, want peer_id", m.GetLabel())
		}
	}
	for name := range fams {
		if strings.HasPrefix(name, "raft_replication_appendEntries_rpc_") {
			return fmt.Errorf("per-peer copy %s not blocked", name)
		}
		if strings.HasPrefix(name, "raft_replication_heartbeat") {
			return fmt.Errorf("%s shown: heartbeats are answered locally", name)
		}
	}
	return nil
}

// TestKafkaRequestMetrics: the request metrics of a node after a real
// client produced and consumed through it, and after a Produce to a topic
// that does not exist.
func TestKafkaRequestMetrics(t *testing.T) {
	c := clustertest.Start(t, 1)
	const topic, records = "reqs", 50
	c.CreateTopic(topic, 2, 1)
	addr := c.Nodes[0].HTTPAddr()
	before := promtest.Scrape(t, addr)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Uncompressed, so the bytes produced are at least the values'.
	prod := c.Client(kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgo.NoCompression()))
	var recs []*kgo.Record
	val := bytes.Repeat([]byte("v"), 100)
	for i := 0; i < records; i++ {
		recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: val})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cons := c.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for read := 0; read < records; {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records", read, records)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if bytes.Equal(r.Value, val) {
				read++
			}
		})
	}

	// A Produce to two partitions of a topic that does not exist.
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "no-such-topic"
	for p := int32(0); p < 2; p++ {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = p
		rp.Records = log.BuildBatch(nil, log.BatchOptions{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, []log.Record{{Value: val}})
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	kresp, err := prod.Broker(int(c.Nodes[0].ID())).Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for _, rp := range kresp.(*kmsg.ProduceResponse).Topics[0].Partitions {
		if rp.ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Fatalf("produce to a missing topic: partition %d answered %v", rp.Partition, kerr.ErrorForCode(rp.ErrorCode))
		}
	}

	// A request is observed after its response is written, on its
	// connection's goroutine: the client may see a response before its
	// observation is counted.
	clustertest.Eventually(t, 10*time.Second, func() error {
		return checkRequestMetrics(before, promtest.Scrape(t, addr), records, len(val))
	})
}

// checkRequestMetrics compares the scrapes of TestKafkaRequestMetrics
// taken before and after the traffic.
func checkRequestMetrics(before, after map[string]*dto.MetricFamily, records, valueSize int) error {
	value := func(fams map[string]*dto.MetricFamily, name string, lbl ...string) float64 {
		want := map[string]string{}
		for i := 0; i+1 < len(lbl); i += 2 {
			want[lbl[i]] = lbl[i+1]
		}
		v, _ := promtest.GaugeValue(fams, name, want)
		return v
	}
	delta := func(name string, lbl ...string) float64 {
		return value(after, name, lbl...) - value(before, name, lbl...)
	}
	var errs []error
	if d := delta("raftlog_kafka_errors_total", "api", "Produce", "error", "UNKNOWN_TOPIC_OR_PARTITION"); d != 2 {
		errs = append(errs, fmt.Errorf("UNKNOWN_TOPIC_OR_PARTITION errors of Produce grew by %v, want 2 (one per partition)", d))
	}
	if d := delta("raftlog_kafka_failed_requests_total", "api", "Produce"); d != 1 {
		errs = append(errs, fmt.Errorf("failed Produce requests grew by %v, want 1", d))
	}
	for _, api := range []string{"Produce", "Fetch", "Metadata", "ApiVersions"} {
		n := value(after, "raftlog_kafka_requests_total", "api", api)
		h := promtest.Histogram(after, "raftlog_kafka_request_duration_seconds", map[string]string{"api": api})
		qb, rb := value(after, "raftlog_kafka_request_bytes_total", "api", api), value(after, "raftlog_kafka_response_bytes_total", "api", api)
		switch {
		case n < 1:
			errs = append(errs, fmt.Errorf("%s: %v requests", api, n))
		case h == nil || float64(h.GetSampleCount()) != n || h.GetSampleSum() <= 0:
			errs = append(errs, fmt.Errorf("%s: %v requests, latency histogram %v", api, n, h))
		case qb <= 0 || rb <= 0:
			errs = append(errs, fmt.Errorf("%s: request bytes %v, response bytes %v", api, qb, rb))
		}
	}
	values := float64(records * valueSize)
	if d := delta("raftlog_kafka_requests_total", "api", "Produce"); d < 2 {
		errs = append(errs, fmt.Errorf("Produce requests grew by %v, want at least 2", d))
	}
	if d := delta("raftlog_kafka_request_bytes_total", "api", "Produce"); d < values {
		errs = append(errs, fmt.Errorf("Produce request bytes grew by %v, less than the values' %v", d, values))
	}
	if d := delta("raftlog_kafka_produce_records_total"); d < float64(records) {
		errs = append(errs, fmt.Errorf("produced records grew by %v, want at least %d", d, records))
	}
	prodBytes := delta("raftlog_kafka_produce_bytes_total")
	if prodBytes < values {
		errs = append(errs, fmt.Errorf("produced bytes grew by %v, less than the values' %v", prodBytes, values))
	}
	if d := delta("raftlog_kafka_fetch_bytes_total"); d < prodBytes {
		errs = append(errs, fmt.Errorf("fetched bytes grew by %v, less than the %v produced (all of which were read)", d, prodBytes))
	}
	if v := value(after, "raftlog_kafka_errors_total", "api", "Fetch"); v != 0 {
		errs = append(errs, fmt.Errorf("%v Fetch errors", v))
	}
	return errors.Join(errs...)
}
