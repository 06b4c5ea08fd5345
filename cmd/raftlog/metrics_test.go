package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/rpc"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// scrape fetches and parses one node's /metrics.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics of %s: %s", addr, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics of %s: %v", addr, err)
	}
	return fams
}

// gaugeValue is the value of the series of family name whose labels
// include want (nil: the family's only series); ok is false when absent.
func gaugeValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
		return 0, true
	}
	return 0, false
}

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
		"raftlog_node_raft_direct_connections",
		// The standard collectors.
		"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes",
		"process_open_fds",
	}
	var led, controllers, direct float64
	leaders := make([]int, partitions)
	for i, fams := range all {
		node := i + 1
		for _, name := range perNode {
			if _, ok := gaugeValue(fams, name, nil); !ok {
				return fmt.Errorf("node %d: no %s", node, name)
			}
		}
		if v, _ := gaugeValue(fams, "raftlog_node_info", map[string]string{"node_id": strconv.Itoa(node)}); v != 1 {
			return fmt.Errorf("node %d: raftlog_node_info names another node", node)
		}
		if v, _ := gaugeValue(fams, "raftlog_node_replicas", nil); v != float64(partitions) {
			return fmt.Errorf("node %d: %v replicas, want %d", node, v, partitions)
		}
		for _, name := range []string{"raftlog_node_under_replicated_partitions", "raftlog_node_gated_replicas"} {
			if v, _ := gaugeValue(fams, name, nil); v != 0 {
				return fmt.Errorf("node %d: %s = %v, want 0", node, name, v)
			}
		}
		if v, _ := gaugeValue(fams, "raftlog_node_live_brokers", nil); v != 3 {
			return fmt.Errorf("node %d: %v live brokers, want 3", node, v)
		}
		v, _ := gaugeValue(fams, "raftlog_node_partitions_led", nil)
		led += v
		v, _ = gaugeValue(fams, "raftlog_node_controller_leader", nil)
		controllers += v
		v, _ = gaugeValue(fams, "raftlog_node_raft_direct_connections", nil)
		direct += v
		for p := 0; p < partitions; p++ {
			lbl := map[string]string{"topic": topic, "partition": strconv.Itoa(p)}
			val := map[string]float64{}
			for _, name := range perPartition {
				v, ok := gaugeValue(fams, name, lbl)
				if !ok {
					return fmt.Errorf("node %d: no %s%v", node, name, lbl)
				}
				val[name] = v
			}
			start, end, hw := val["raftlog_partition_log_start_offset"], val["raftlog_partition_log_end_offset"], val["raftlog_partition_high_watermark"]
			if start > hw || hw > end {
				return fmt.Errorf("node %d %s/%d: start %v, high watermark %v, end %v out of order", node, topic, p, start, hw, end)
			}
			if lag := val["raftlog_partition_commit_lag"]; lag != end-hw {
				return fmt.Errorf("node %d %s/%d: commit lag %v, want %v", node, topic, p, lag, end-hw)
			}
			if val["raftlog_partition_log_segments"] < 1 || val["raftlog_partition_log_size_bytes"] <= 0 || val["raftlog_partition_raft_term"] < 1 {
				return fmt.Errorf("node %d %s/%d: segments %v, size %v, term %v", node, topic, p,
					val["raftlog_partition_log_segments"], val["raftlog_partition_log_size_bytes"], val["raftlog_partition_raft_term"])
			}
			if val["raftlog_partition_gated"] != 0 || val["raftlog_partition_recovery_truncated_bytes"] != 0 || val["raftlog_partition_recovery_duration_seconds"] < 0 {
				return fmt.Errorf("node %d %s/%d: gated %v, truncated %v, recovery %vs", node, topic, p, val["raftlog_partition_gated"],
					val["raftlog_partition_recovery_truncated_bytes"], val["raftlog_partition_recovery_duration_seconds"])
			}
			if val["raftlog_partition_leader"] == 1 {
				leaders[p]++
				if hw <= 0 {
					return fmt.Errorf("node %d leads %s/%d with high watermark %v", node, topic, p, hw)
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

// eventually retries check until it returns nil, failing the test with
// its last error at the deadline: leadership may still move just after a
// topic is created.
func eventually(t *testing.T, timeout time.Duration, check func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal(err)
		case <-tick.C:
		}
	}
}

// TestMetricsAndClusterStatus: /metrics of each node of a 3-node cluster
// and `raftlog cluster status` over all of them.
func TestMetricsAndClusterStatus(t *testing.T) {
	c := startTestCluster(t, 3)
	const topic, partitions = "obs", 3
	c.createTopic(topic, partitions, 3)
	prod := c.client(kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 20; i++ {
		if err := prod.ProduceSync(ctx, &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var addrs []string
	for _, f := range c.flags {
		addrs = append(addrs, f.httpAddr)
	}

	eventually(t, 20*time.Second, func() error {
		var all []map[string]*dto.MetricFamily
		for _, a := range addrs {
			all = append(all, scrape(t, a))
		}
		if err := checkClusterMetrics(all, topic, partitions); err != nil {
			return err
		}
		return checkRaftMetrics(all[0])
	})

	// Every node given, then only the first (the others are discovered
	// from its gossip).
	for _, given := range [][]string{addrs, addrs[:1]} {
		eventually(t, 20*time.Second, func() error {
			var out, errb bytes.Buffer
			code := run([]string{"cluster", "status", "--http", strings.Join(given, ",")}, &out, &errb)
			if code != 0 {
				return fmt.Errorf("cluster status --http %v: exit %d\n%s%s", given, code, out.String(), errb.String())
			}
			return checkStatusOutput(out.String(), addrs, topic, partitions)
		})
	}
}

// checkRaftMetrics checks that what Raft measures of itself is there:
// commit time, and the replication round trip labelled by peer, without
// the copies raft names per peer.
func checkRaftMetrics(fams map[string]*dto.MetricFamily) error {
	for _, name := range []string{"raft_commitTime", "raft_replication_appendEntries_rpc", "raft_rpc_appendEntries_storeLogs"} {
		f, ok := fams[name]
		if !ok || f.GetType() != dto.MetricType_SUMMARY || len(f.GetMetric()) == 0 {
			return fmt.Errorf("no summary %s", name)
		}
		if s := f.GetMetric()[0].GetSummary(); s.GetSampleCount() == 0 {
			return fmt.Errorf("%s: no samples", name)
		}
	}
	for _, m := range fams["raft_replication_appendEntries_rpc"].GetMetric() {
		if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != "peer_id" {
			return fmt.Errorf("raft_replication_appendEntries_rpc labels %v, want peer_id", m.GetLabel())
		}
	}
	for name := range fams {
		if strings.HasPrefix(name, "raft_replication_appendEntries_rpc_") || strings.HasPrefix(name, "raft_replication_heartbeat_") {
			return fmt.Errorf("per-peer copy %s not blocked", name)
		}
	}
	return nil
}

// checkStatusOutput checks that the table names every node as ready and
// every partition with a leader and no commit lag.
func checkStatusOutput(out string, addrs []string, topic string, partitions int) error {
	nodes := map[string]bool{}
	parts := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 6 && f[2] == "ready":
			id, _ := strconv.Atoi(f[0])
			if id < 1 || id > len(addrs) || f[1] != addrs[id-1] {
				return fmt.Errorf("node row %q: unknown node or address\n%s", line, out)
			}
			nodes[f[0]] = true
		case len(f) >= 8 && f[0] == topic:
			if ld, err := strconv.Atoi(f[2]); err != nil || ld < 1 || ld > len(addrs) {
				return fmt.Errorf("partition row %q: no leader\n%s", line, out)
			}
			if hw, _ := strconv.Atoi(f[4]); hw <= 0 {
				return fmt.Errorf("partition row %q: high watermark %s\n%s", line, f[4], out)
			}
			parts[f[1]] = true
		}
	}
	for i := range addrs {
		if !nodes[strconv.Itoa(i+1)] {
			return fmt.Errorf("node %d not listed as ready\n%s", i+1, out)
		}
	}
	for p := 0; p < partitions; p++ {
		if !parts[strconv.Itoa(p)] {
			return fmt.Errorf("partition %s/%d not listed\n%s", topic, p, out)
		}
	}
	return nil
}

// TestClusterStatusUnreachable: a node that does not answer is listed as
// down and the command exits 1.
func TestClusterStatusUnreachable(t *testing.T) {
	addr := freeAddr(t) // closed again: nothing listens there
	var out, errb bytes.Buffer
	if code := run([]string{"cluster", "status", "--http", addr, "--timeout", "2s"}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), addr) || !strings.Contains(out.String(), "down") {
		t.Fatalf("the unreachable node is not listed as down:\n%s", out.String())
	}
}

// histogram is the histogram of family name whose labels include want;
// nil when absent.
func histogram(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Histogram {
	f, ok := fams[name]
	if !ok {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m.GetHistogram()
	}
	return nil
}

// TestKafkaRequestMetrics: the request metrics of a node after a real
// client produced and consumed through it, and after a Produce to a topic
// that does not exist.
func TestKafkaRequestMetrics(t *testing.T) {
	c := startTestCluster(t, 1)
	const topic, records = "reqs", 50
	c.createTopic(topic, 2, 1)
	addr := c.flags[0].httpAddr
	before := scrape(t, addr)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Uncompressed, so the bytes produced are at least the values'.
	prod := c.client(kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgo.NoCompression()))
	var recs []*kgo.Record
	val := bytes.Repeat([]byte("v"), 100)
	for i := 0; i < records; i++ {
		recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: val})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cons := c.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
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
	kresp, err := prod.Broker(int(c.flags[0].nodeID)).Request(ctx, req)
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
	eventually(t, 10*time.Second, func() error {
		return checkRequestMetrics(before, scrape(t, addr), records, len(val))
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
		v, _ := gaugeValue(fams, name, want)
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
		h := histogram(after, "raftlog_kafka_request_duration_seconds", map[string]string{"api": api})
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

// produceObservation is an observed acks=-1 Produce of one batch of ten
// records to two partitions, the second answered code.
func produceObservation(code int16) rpc.Observation {
	batch := log.BuildBatch(nil, log.BatchOptions{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, make([]log.Record, 10))
	req := kmsg.NewPtrProduceRequest()
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	rt := kmsg.NewProduceRequestTopic()
	st := kmsg.NewProduceResponseTopic()
	for p := int32(0); p < 2; p++ {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = p, batch
		rt.Partitions = append(rt.Partitions, rp)
		sp := kmsg.NewProduceResponseTopicPartition()
		sp.Partition = p
		st.Partitions = append(st.Partitions, sp)
	}
	st.Partitions[1].ErrorCode = code
	req.Topics, resp.Topics = append(req.Topics, rt), append(resp.Topics, st)
	return rpc.Observation{Key: 0, Version: 9, RequestBytes: 300, ResponseBytes: 80, Duration: time.Millisecond,
		Failed: code != 0, Request: req, Response: resp}
}

// TestKafkaMetricsObserve: what one observation counts, and that counting
// it allocates nothing once its series exist.
func TestKafkaMetricsObserve(t *testing.T) {
	km := newKafkaMetrics()
	ok, failed := produceObservation(0), produceObservation(kerr.NotLeaderForPartition.Code)
	km.ObserveRequest(ok)
	km.ObserveRequest(failed)
	const runs = 100
	if a := testing.AllocsPerRun(runs, func() { km.ObserveRequest(ok) }); a != 0 {
		t.Errorf("%v allocations per Produce observed", a)
	}
	if a := testing.AllocsPerRun(runs, func() { km.ObserveRequest(failed) }); a != 0 {
		t.Errorf("%v allocations per failed Produce observed", a)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(km)
	gathered, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]*dto.MetricFamily{}
	for _, f := range gathered {
		fams[f.GetName()] = f
	}
	// AllocsPerRun runs its function once more than it measures.
	const oks, fails = runs + 2, runs + 2
	for name, want := range map[string]float64{
		"raftlog_kafka_requests_total":        oks + fails,
		"raftlog_kafka_failed_requests_total": fails,
		"raftlog_kafka_request_bytes_total":   300 * (oks + fails),
		"raftlog_kafka_response_bytes_total":  80 * (oks + fails),
		"raftlog_kafka_produce_records_total": 10 * (2*oks + fails),
	} {
		if v, _ := gaugeValue(fams, name, nil); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	if v, _ := gaugeValue(fams, "raftlog_kafka_errors_total", map[string]string{"api": "Produce", "error": "NOT_LEADER_FOR_PARTITION"}); v != fails {
		t.Errorf("NOT_LEADER_FOR_PARTITION errors = %v, want %d", v, fails)
	}
	if h := histogram(fams, "raftlog_kafka_request_duration_seconds", map[string]string{"api": "Produce"}); h.GetSampleCount() != oks+fails {
		t.Errorf("latency histogram: %v", h)
	}
}

// BenchmarkKafkaMetricsObserve: the cost the metrics add to a Produce.
func BenchmarkKafkaMetricsObserve(b *testing.B) {
	km := newKafkaMetrics()
	o := produceObservation(0)
	b.ReportAllocs()
	for b.Loop() {
		km.ObserveRequest(o)
	}
}
