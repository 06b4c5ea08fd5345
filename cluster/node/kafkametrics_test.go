package node

import (
	"maps"
	"slices"
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/raftlog/raftlog/cluster/clustertest/promtest"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/rpc"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

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
		if v, _ := promtest.GaugeValue(fams, name, nil); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	if v, _ := promtest.GaugeValue(fams, "raftlog_kafka_errors_total", map[string]string{"api": "Produce", "error": "NOT_LEADER_FOR_PARTITION"}); v != fails {
		t.Errorf("NOT_LEADER_FOR_PARTITION errors = %v, want %d", v, fails)
	}
	if h := promtest.Histogram(fams, "raftlog_kafka_request_duration_seconds", map[string]string{"api": "Produce"}); h.GetSampleCount() != oks+fails {
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

func TestKeyHasPrefix(t *testing.T) {
	for _, c := range []struct {
		key    []string
		prefix string
		want   bool
	}{
		{[]string{"raft", "commitTime"}, "raft.commitTime", true},
		{[]string{"raft", "replication", "heartbeat"}, "raft.replication.heartbeat", true},
		{[]string{"raft", "replication", "heartbeat", "1-ab"}, "raft.replication.heartbeat.", true},
		{[]string{"raft", "replication", "heartbeat"}, "raft.replication.heartbeat.", false},
		{[]string{"raft", "fsm", "applyBatchNum"}, "raft.fsm.applyBatch", true},
		{[]string{"raft", "state", "leader"}, "raft.state", true},
		{[]string{"raft", "stat"}, "raft.state", false},
		{[]string{"raft", "replication"}, "raft.replication.heartbeat", false},
		{[]string{"raftx", "state"}, "raft.state", false},
		{[]string{"raft.state"}, "raft.state", true},
		{nil, "raft", false},
	} {
		if got := keyHasPrefix(c.key, c.prefix); got != c.want {
			t.Errorf("keyHasPrefix(%q, %q) = %v, want %v", c.key, c.prefix, got, c.want)
		}
	}
	f := &raftMetricSink{}
	if !f.allowed([]string{"raft", "replication", "appendEntries", "rpc"}) || f.allowed([]string{"raft", "replication", "appendEntries", "rpc", "2-cd"}) {
		t.Error("the raft sink passes the per-peer copy or blocks the labelled measurement")
	}
}

// BenchmarkRaftMetricSink measures a sample of an existing series, as a
// follower measures each append: it allocates nothing.
func BenchmarkRaftMetricSink(b *testing.B) {
	s := &raftMetricSink{}
	key := []string{"raft", "rpc", "appendEntries", "storeLogs"}
	s.AddSample(key, 1)
	b.ReportAllocs()
	for b.Loop() {
		s.AddSample(key, 1)
	}
}

// TestRaftMetricSink: what Raft measures becomes series named as
// go-metrics' Prometheus sink names them: samples as histograms,
// counters and gauges as such, labels kept, blocked keys and negative
// counts dropped.
func TestRaftMetricSink(t *testing.T) {
	s := &raftMetricSink{}
	peer := []gometrics.Label{{Name: "peer_id", Value: "2-ab"}}
	s.AddSampleWithLabels([]string{"raft", "replication", "appendEntries", "rpc"}, 1.5, peer)
	s.AddSampleWithLabels([]string{"raft", "replication", "appendEntries", "rpc"}, 30, peer)
	s.AddSample([]string{"raft", "replication", "appendEntries", "rpc", "2-ab"}, 1) // the per-peer copy
	s.IncrCounter([]string{"raft", "state", "candidate"}, 1)
	s.IncrCounter([]string{"raft", "state", "candidate"}, 2)
	s.IncrCounter([]string{"raft", "state", "candidate"}, -1)
	s.SetGauge([]string{"raft", "snapshot", "x"}, 7)
	s.AddSample([]string{"raft", "replication", "heartbeat"}, 1) // not shown
	reg := prometheus.NewRegistry()
	reg.MustRegister(s)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		got[f.GetName()] = f
	}
	if len(got) != 3 {
		t.Fatalf("series %v, want 3", slices.Sorted(maps.Keys(got)))
	}
	h := got["raft_replication_appendEntries_rpc"]
	if h.GetType() != dto.MetricType_HISTOGRAM || h.GetMetric()[0].GetHistogram().GetSampleCount() != 2 ||
		h.GetMetric()[0].GetHistogram().GetSampleSum() != 31.5 || h.GetMetric()[0].GetLabel()[0].GetValue() != "2-ab" {
		t.Errorf("the round trip: %v", h)
	}
	if c := got["raft_state_candidate"]; c.GetType() != dto.MetricType_COUNTER || c.GetMetric()[0].GetCounter().GetValue() != 3 {
		t.Errorf("the candidate counter: %v", c)
	}
	if g := got["raft_snapshot_x"]; g.GetType() != dto.MetricType_GAUGE || g.GetMetric()[0].GetGauge().GetValue() != 7 {
		t.Errorf("the gauge: %v", g)
	}
}
