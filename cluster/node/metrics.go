package node

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/raftlog/raftlog/cluster"
	"github.com/raftlog/raftlog/log"
	"github.com/raftlog/raftlog/rpc"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// /metrics: the node's state in the Prometheus text format. The node's
// collector counts nothing in the background: it reads the node's
// replicas, logs and membership when it is scraped. The Kafka request
// metrics (kafkaMetrics, below) are counted as requests are served.

var partitionLabels = []string{"topic", "partition"}

func partitionDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("raftlog_partition_"+name, help, partitionLabels, nil)
}

func nodeDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("raftlog_node_"+name, help, labels, nil)
}

var (
	descLogStart      = partitionDesc("log_start_offset", "First offset of the local replica's log.")
	descLogEnd        = partitionDesc("log_end_offset", "Offset after the last batch of the local replica's log.")
	descHighWatermark = partitionDesc("high_watermark", "Offset below which every batch is committed, as this replica knows it.")
	descLogSize       = partitionDesc("log_size_bytes", "Bytes of the local replica's log segments.")
	descSegments      = partitionDesc("log_segments", "Segments of the local replica's log.")
	descTerm          = partitionDesc("raft_term", "Current Raft term of the replica's group (the leader epoch).")
	descLeader        = partitionDesc("leader", "1 when this replica leads its partition, else 0.")
	descGated         = partitionDesc("gated", "1 when the vote guard holds this replica back, else 0.")
	descWriteStopped  = partitionDesc("write_stopped", "1 when a write error (a full disk, an I/O error) stopped the replica's log until it is reopened, else 0.")
	descCommitLag     = partitionDesc("commit_lag", "Offsets of the local log not yet known committed: the log end minus the end of the entry at Raft's commit index (0 on an idle partition, whatever Raft entries it ends with).")
	descLastContact   = partitionDesc("raft_last_contact_seconds", "Seconds since a follower last heard from its leader, or, quiesced, from the leader's node (0 on the leader; absent before any contact).")
	descRecDuration   = partitionDesc("recovery_duration_seconds", "Time the last open of the replica's log spent recovering it.")
	descRecTruncated  = partitionDesc("recovery_truncated_bytes", "Bytes the last open of the replica's log cut off a torn or corrupt tail.")
	descProducers     = partitionDesc("producer_ids", "Idempotent producers whose sequence state the replica holds.")
	descProdForgotten = partitionDesc("producer_ids_forgotten_total", "Idempotent producers the replica forgot (expired or past the cap) since it opened.")

	descInfo            = nodeDesc("info", "Always 1; the labels name the node and its cluster.", "node_id", "cluster_id")
	descReady           = nodeDesc("ready", "1 when the node is ready (as /readyz), else 0.")
	descReplicas        = nodeDesc("replicas", "Partition replicas open on this node.")
	descPartitionsLed   = nodeDesc("partitions_led", "Partitions whose local replica leads.")
	descUnderReplicated = nodeDesc("under_replicated_partitions", "Partitions led here with an assigned replica that is not a live member.")
	descGatedReplicas   = nodeDesc("gated_replicas", "Local replicas the vote guard holds back.")
	descStoppedReplicas = nodeDesc("write_stopped_replicas", "Local replicas a write error stopped (the node reopens them with a backoff).")
	descQuiesced        = nodeDesc("quiesced_replicas", "Local replicas that follow quiesced: sent nothing while their leader's node is alive (0 with --no-quiesce).")
	descControllerLead  = nodeDesc("controller_leader", "1 when this node leads the controller group, else 0.")
	descBrokers         = nodeDesc("live_brokers", "Live members of the cluster as this node sees them.")
	descOffsetGroups    = nodeDesc("offset_groups", "Consumer groups with committed offsets, as this node's metadata holds them.")
	descCtrlLogStart    = nodeDesc("controller_log_start_offset", "First offset of this node's replica of the controller log (the last metadata snapshot's).")
	descCtrlLogEnd      = nodeDesc("controller_log_end_offset", "Offset after the last batch of this node's replica of the controller log.")
	descAwaitingPeers   = nodeDesc("partitions_awaiting_peers", "New partitions whose first replica is here and waits, before its group's first election, for a majority of the partition's nodes to open their replicas.")
	descDirectConns     = nodeDesc("raft_direct_connections", "Direct connections this node dialed for append streams and holds open, to all peers (--raft-direct-connections bounds them per peer).")
)

// nodeCollector is a prometheus.Collector over one node's current state.
type nodeCollector struct{ nd *cluster.Node }

func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descLogStart, descLogEnd, descHighWatermark, descLogSize, descSegments, descTerm, descLeader,
		descGated, descCommitLag, descLastContact, descRecDuration, descRecTruncated,
		descProducers, descProdForgotten,
		descInfo, descReady, descReplicas, descPartitionsLed, descUnderReplicated, descGatedReplicas,
		descWriteStopped, descStoppedReplicas, descQuiesced, descAwaitingPeers,
		descControllerLead, descBrokers, descOffsetGroups, descCtrlLogStart, descCtrlLogEnd, descDirectConns,
	} {
		ch <- d
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	nd := c.nd
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	local := nd.LocalReplicas()
	led, gated, stopped := 0, 0, 0
	for _, lr := range local {
		r := lr.Replica
		l := r.Log()
		lbl := []string{lr.Topic, strconv.Itoa(int(lr.Partition))}
		end, hw := l.EndOffset(), r.HighWatermark()
		leader := r.IsLeader()
		isGated := r.Gated()
		if leader {
			led++
		}
		if isGated {
			gated++
		}
		isStopped := r.WriteError() != nil
		if isStopped {
			stopped++
		}
		gauge(descLogStart, float64(l.StartOffset()), lbl...)
		gauge(descLogEnd, float64(end), lbl...)
		gauge(descHighWatermark, float64(hw), lbl...)
		gauge(descLogSize, float64(l.Size()), lbl...)
		gauge(descSegments, float64(len(l.Segments())), lbl...)
		gauge(descTerm, float64(r.Term()), lbl...)
		gauge(descLeader, b2f(leader), lbl...)
		gauge(descGated, b2f(isGated), lbl...)
		gauge(descWriteStopped, b2f(isStopped), lbl...)
		gauge(descCommitLag, float64(r.CommitLag()), lbl...)
		if leader {
			gauge(descLastContact, 0, lbl...)
		} else if last := r.LastContact(); !last.IsZero() {
			gauge(descLastContact, time.Since(last).Seconds(), lbl...)
		}
		rec := l.Recovery()
		gauge(descRecDuration, rec.Duration.Seconds(), lbl...)
		gauge(descRecTruncated, float64(rec.TruncatedBytes), lbl...)
		held, forgotten := r.ProducerIDs()
		gauge(descProducers, float64(held), lbl...)
		ch <- prometheus.MustNewConstMetric(descProdForgotten, prometheus.CounterValue, float64(forgotten), lbl...)
	}
	under := 0
	for _, t := range nd.Meta().Topics() {
		for _, st := range nd.PartitionStates(t) {
			if st.Leader == nd.ID() && len(st.Offline) > 0 {
				under++
			}
		}
	}
	ready, _ := nd.Ready()
	gauge(descInfo, 1, strconv.Itoa(int(nd.ID())), nd.Meta().ClusterID())
	gauge(descReady, b2f(ready))
	gauge(descReplicas, float64(len(local)))
	gauge(descPartitionsLed, float64(led))
	gauge(descUnderReplicated, float64(under))
	gauge(descGatedReplicas, float64(gated))
	gauge(descStoppedReplicas, float64(stopped))
	gauge(descQuiesced, float64(nd.QuiescedReplicas()))
	gauge(descAwaitingPeers, float64(nd.AwaitingPeers()))
	gauge(descControllerLead, b2f(nd.ControllerID() == nd.ID()))
	gauge(descBrokers, float64(len(nd.Brokers())))
	gauge(descOffsetGroups, float64(len(nd.Meta().OffsetGroups())))
	start, end := nd.ControllerLog()
	gauge(descCtrlLogStart, float64(start))
	gauge(descCtrlLogEnd, float64(end))
	gauge(descDirectConns, float64(nd.Mux().DirectConnections()))
}

// metricsHandler serves /metrics from a registry of its own: the node's
// collector, its Kafka request metrics, what Raft measures of itself, and
// the Go runtime and process collectors.
func metricsHandler(nd *cluster.Node, km *kafkaMetrics) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		nodeCollector{nd},
		km,
		raftSink(),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:      reg,
		ErrorHandling: promhttp.ContinueOnError,
	}))
}

// raftMetricPrefixes are the measurements of hashicorp/raft that /metrics
// shows (histograms in milliseconds, under raft's own names, as Consul and
// Nomad name them): commit time, the leader's log dispatch, the
// replication round trip per follower (peer_id), a follower's handling of
// an append and its log write, the FSM's batches, snapshots, and state
// changes. Raft also names each measurement per peer in the metric's
// name; those copies are blocked. The heartbeat's round trip is not
// shown: a partition leader's transport answers its heartbeats itself
// while the follower's node lives, so it measured the scheduler, and
// summarising it, per heartbeat of every group, was a twentieth of a busy
// node's CPU.
var raftMetricPrefixes = []string{
	"raft.commitTime",
	"raft.leader.dispatchLog",
	"raft.replication.appendEntries.rpc",
	"raft.rpc.appendEntries",
	"raft.fsm.applyBatch",
	"raft.snapshot",
	"raft.state",
	"raft.transition",
}

var raftMetricBlocked = []string{
	"raft.replication.appendEntries.rpc.",
}

// raftSink receives what hashicorp/raft measures through go-metrics, which
// is global to the process: a process running several nodes (`raftlog
// dev`, `raftlog bench compare`) shows their sum on each node's /metrics.
var raftSink = sync.OnceValue(func() *raftMetricSink {
	sink := &raftMetricSink{}
	cfg := gometrics.DefaultConfig("")
	cfg.EnableHostname = false
	cfg.EnableRuntimeMetrics = false
	cfg.EnableServiceLabel = false
	cfg.FilterDefault = true // the sink filters
	if _, err := gometrics.NewGlobal(cfg, sink); err != nil {
		panic(err) // NewGlobal fails only where its runtime collection does, which is off
	}
	return sink
})

// raftMetricSink is a go-metrics sink and a prometheus.Collector of what
// it received: the measurements raftMetricPrefixes names and
// raftMetricBlocked does not, each a series of its own, named by the
// key's parts joined by '_' (as go-metrics' Prometheus sink names them),
// samples as histograms in milliseconds, counters and gauges as such.
//
// Every measurement takes no lock once its series exists: Raft measures
// from each group's main loop (a follower's every append, every state
// change), and thousands of groups measured at once. go-metrics' own
// Prometheus sink stored each measurement back into a sync.Map under the
// key's lock, and summaries observe under a lock too: when thousands of
// groups changed state together on a node starved of CPU, their main
// loops queued for minutes on that one lock, each hand-off waiting for
// the scheduler, and their groups went on electing around them.
//
// go-metrics' own filter joins each key into a string and looks it up in
// a radix tree on every measurement, before asking the sink: a tenth of
// an idle node's CPU with a thousand partition leaders, which measure
// each heartbeat and append to each follower. allowed compares the key's
// parts in place.
type raftMetricSink struct {
	mu sync.Mutex // creating a series
	// series maps kind, key and labels to a series; replaced whole (under
	// mu) when one is added, so that a measurement looks its series up
	// with neither a lock nor an allocation.
	series atomic.Pointer[map[string]prometheus.Collector]
}

// raftSampleBuckets are the bounds, in milliseconds, of the histograms of
// Raft's timings: from a tenth of a millisecond to ten seconds.
var raftSampleBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}

func (s *raftMetricSink) allowed(key []string) bool {
	for _, p := range raftMetricBlocked {
		if keyHasPrefix(key, p) {
			return false
		}
	}
	for _, p := range raftMetricPrefixes {
		if keyHasPrefix(key, p) {
			return true
		}
	}
	return false
}

// keyHasPrefix reports whether the key's parts joined by '.' begin with
// prefix, without joining them.
func keyHasPrefix(key []string, prefix string) bool {
	for i, k := range key {
		if i > 0 {
			if prefix == "" {
				return true
			}
			if prefix[0] != '.' {
				return false
			}
			prefix = prefix[1:]
		}
		if len(prefix) <= len(k) {
			return k[:len(prefix)] == prefix
		}
		if prefix[:len(k)] != k {
			return false
		}
		prefix = prefix[len(k):]
	}
	return prefix == ""
}

// metricNameReplacer makes a go-metrics key a Prometheus name, as
// go-metrics' Prometheus sink does.
var metricNameReplacer = strings.NewReplacer(" ", "_", ".", "_", "=", "_", "-", "_", "/", "_")

// get returns the series of kind ('c' counter, 'g' gauge, 'h' histogram)
// for key and labels, made when it is the first measurement.
func (s *raftMetricSink) get(kind byte, key []string, labels []gometrics.Label) prometheus.Collector {
	var buf [128]byte
	id := append(buf[:0], kind)
	for i, k := range key {
		if i > 0 {
			id = append(id, '_')
		}
		id = append(id, k...)
	}
	for _, l := range labels {
		id = append(id, ';')
		id = append(id, l.Name...)
		id = append(id, '=')
		id = append(id, l.Value...)
	}
	if m := s.series.Load(); m != nil {
		if c, ok := (*m)[string(id)]; ok { // no allocation: a map index by string(bytes)
			return c
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.series.Load()
	if old != nil {
		if c, ok := (*old)[string(id)]; ok {
			return c
		}
	}
	name := metricNameReplacer.Replace(strings.Join(key, "_"))
	constLabels := prometheus.Labels{}
	for _, l := range labels {
		constLabels[l.Name] = l.Value
	}
	var c prometheus.Collector
	switch kind {
	case 'c':
		c = prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: name, ConstLabels: constLabels})
	case 'g':
		c = prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: name, ConstLabels: constLabels})
	default:
		c = prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: name + " (milliseconds)", ConstLabels: constLabels, Buckets: raftSampleBuckets})
	}
	m := map[string]prometheus.Collector{string(id): c}
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	s.series.Store(&m)
	return c
}

func (s *raftMetricSink) SetGauge(key []string, val float32) { s.SetGaugeWithLabels(key, val, nil) }

func (s *raftMetricSink) SetGaugeWithLabels(key []string, val float32, labels []gometrics.Label) {
	if s.allowed(key) {
		s.get('g', key, labels).(prometheus.Gauge).Set(float64(val))
	}
}

// EmitKey is not kept: Prometheus has no type for single values.
func (s *raftMetricSink) EmitKey(key []string, val float32) {}

func (s *raftMetricSink) IncrCounter(key []string, val float32) {
	s.IncrCounterWithLabels(key, val, nil)
}

func (s *raftMetricSink) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	if val >= 0 && s.allowed(key) { // a counter never goes down
		s.get('c', key, labels).(prometheus.Counter).Add(float64(val))
	}
}

func (s *raftMetricSink) AddSample(key []string, val float32) { s.AddSampleWithLabels(key, val, nil) }

func (s *raftMetricSink) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	if s.allowed(key) {
		s.get('h', key, labels).(prometheus.Histogram).Observe(float64(val))
	}
}

// Describe describes nothing: the series appear as Raft measures them
// (an unchecked collector).
func (s *raftMetricSink) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (s *raftMetricSink) Collect(ch chan<- prometheus.Metric) {
	if m := s.series.Load(); m != nil {
		for _, c := range *m {
			c.Collect(ch)
		}
	}
}

// kafkaMetrics counts the Kafka requests the node serves: it is the rpc
// server's observer, and a prometheus.Collector of what it counted. The
// series of an API appear with its first request. Observing allocates
// nothing once an API's series (and an error code's) exist.
type kafkaMetrics struct {
	requests, failed, reqBytes, respBytes *prometheus.CounterVec
	errors                                *prometheus.CounterVec
	latency                               *prometheus.HistogramVec
	produceRecords, produceBytes          prometheus.Counter
	fetchBytes                            prometheus.Counter

	mu   sync.Mutex // creates apiMetrics
	apis [256]atomic.Pointer[apiMetrics]
	rare map[int16]*apiMetrics // keys past apis; under mu
}

// apiMetrics are the series of one API key, resolved once.
type apiMetrics struct {
	name                                  string
	requests, failed, reqBytes, respBytes prometheus.Counter
	latency                               prometheus.Observer

	mu   sync.Mutex
	errs map[int16]prometheus.Counter
}

// latencyBuckets run from 100µs to 30s: a Fetch long poll waits up to its
// MaxWaitMs (kgo: 5s).
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

func newKafkaMetrics() *kafkaMetrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "raftlog_kafka_" + name, Help: help}, labels)
	}
	return &kafkaMetrics{
		requests:  counter("requests_total", "Kafka requests served, by API.", "api"),
		failed:    counter("failed_requests_total", "Kafka requests whose response carries an error code (at its top or in an entry), by API.", "api"),
		reqBytes:  counter("request_bytes_total", "Bytes of the Kafka requests served, on the wire, by API.", "api"),
		respBytes: counter("response_bytes_total", "Bytes of the Kafka responses written, on the wire, by API.", "api"),
		errors:    counter("errors_total", "Error codes in Kafka responses, by API and error (one per entry carrying it: a Produce failing on three partitions counts three).", "api", "error"),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "raftlog_kafka_request_duration_seconds",
			Help:    "Time from reading a Kafka request to writing its response (a Fetch long poll included), by API.",
			Buckets: latencyBuckets,
		}, []string{"api"}),
		produceRecords: prometheus.NewCounter(prometheus.CounterOpts{Name: "raftlog_kafka_produce_records_total", Help: "Records in the batches of produced partitions answered without error."}),
		produceBytes:   prometheus.NewCounter(prometheus.CounterOpts{Name: "raftlog_kafka_produce_bytes_total", Help: "Record batch bytes of produced partitions answered without error."}),
		fetchBytes:     prometheus.NewCounter(prometheus.CounterOpts{Name: "raftlog_kafka_fetch_bytes_total", Help: "Record batch bytes returned by Fetch."}),
		rare:           map[int16]*apiMetrics{},
	}
}

func (m *kafkaMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.failed, m.reqBytes, m.respBytes, m.errors, m.latency, m.produceRecords, m.produceBytes, m.fetchBytes}
}

func (m *kafkaMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

func (m *kafkaMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// api returns the series of key, creating them on its first request.
func (m *kafkaMetrics) api(key int16) *apiMetrics {
	inArray := key >= 0 && int(key) < len(m.apis)
	if inArray {
		if a := m.apis[key].Load(); a != nil {
			return a
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if inArray {
		if a := m.apis[key].Load(); a != nil {
			return a
		}
	} else if a := m.rare[key]; a != nil {
		return a
	}
	name := kmsg.NameForKey(key)
	if name == "Unknown" {
		name = "key_" + strconv.Itoa(int(key))
	}
	a := &apiMetrics{
		name:      name,
		requests:  m.requests.WithLabelValues(name),
		failed:    m.failed.WithLabelValues(name),
		reqBytes:  m.reqBytes.WithLabelValues(name),
		respBytes: m.respBytes.WithLabelValues(name),
		latency:   m.latency.WithLabelValues(name),
		errs:      map[int16]prometheus.Counter{},
	}
	if inArray {
		m.apis[key].Store(a)
	} else {
		m.rare[key] = a
	}
	return a
}

// errorCounter is the errors_total series of this API and code.
func (a *apiMetrics) errorCounter(vec *prometheus.CounterVec, code int16) prometheus.Counter {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.errs[code]
	if c == nil {
		c = vec.WithLabelValues(a.name, errorName(code))
		a.errs[code] = c
	}
	return c
}

// errorName is the Kafka name of an error code (UNKNOWN_TOPIC_OR_PARTITION),
// or code_N for a code kerr does not know.
func errorName(code int16) string {
	if e, ok := kerr.ErrorForCode(code).(*kerr.Error); ok && e.Code == code {
		return e.Message
	}
	return "code_" + strconv.Itoa(int(code))
}

// ObserveRequest implements rpc.Observer.
func (m *kafkaMetrics) ObserveRequest(o rpc.Observation) {
	a := m.api(o.Key)
	a.requests.Inc()
	a.reqBytes.Add(float64(o.RequestBytes))
	a.respBytes.Add(float64(o.ResponseBytes))
	a.latency.Observe(o.Duration.Seconds())
	if o.Failed {
		a.failed.Inc()
		o.EachError(func(code int16) { a.errorCounter(m.errors, code).Inc() })
	}
	switch req := o.Request.(type) {
	case *kmsg.ProduceRequest:
		m.produced(req, o.Response)
	case *kmsg.FetchRequest:
		if resp, ok := o.Response.(*kmsg.FetchResponse); ok {
			n := 0
			for i := range resp.Topics {
				for j := range resp.Topics[i].Partitions {
					n += len(resp.Topics[i].Partitions[j].RecordBatches)
				}
			}
			m.fetchBytes.Add(float64(n))
		}
	}
}

// produced counts the records and bytes of the partitions of req answered
// without error. The response mirrors the request, topic by topic and
// partition by partition; an acks=0 Produce has none, and was appended
// whole (a failure closes the connection instead of being observed).
func (m *kafkaMetrics) produced(req *kmsg.ProduceRequest, r kmsg.Response) {
	resp, _ := r.(*kmsg.ProduceResponse)
	records, bytes := 0, 0
	for i := range req.Topics {
		for j := range req.Topics[i].Partitions {
			if resp != nil && (i >= len(resp.Topics) || j >= len(resp.Topics[i].Partitions) || resp.Topics[i].Partitions[j].ErrorCode != 0) {
				continue
			}
			recs := req.Topics[i].Partitions[j].Records
			bytes += len(recs)
			records += batchRecords(recs)
		}
	}
	m.produceRecords.Add(float64(records))
	m.produceBytes.Add(float64(bytes))
}

// batchRecords is the record count of the record batches in b (the
// server checked their framing before appending them).
func batchRecords(b []byte) int {
	n := 0
	for len(b) >= log.BatchHeaderSize {
		size := log.Batch(b).Size()
		if size < log.BatchHeaderSize || size > len(b) {
			break
		}
		n += int(log.Batch(b).RecordCount())
		b = b[size:]
	}
	return n
}
