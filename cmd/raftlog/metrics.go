package main

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/raftlog/raftlog/cluster"
)

// /metrics: the node's state in the Prometheus text format. Nothing is
// counted in the background: the collector reads the node's replicas, logs
// and membership when it is scraped.

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
	descCommitLag     = partitionDesc("commit_lag", "Log end offset minus high watermark: offsets written here and not yet known committed.")
	descLastContact   = partitionDesc("raft_last_contact_seconds", "Seconds since a follower last heard from its leader (0 on the leader; absent before any contact).")
	descRecDuration   = partitionDesc("recovery_duration_seconds", "Time the last open of the replica's log spent recovering it.")
	descRecTruncated  = partitionDesc("recovery_truncated_bytes", "Bytes the last open of the replica's log cut off a torn or corrupt tail.")

	descInfo            = nodeDesc("info", "Always 1; the labels name the node and its cluster.", "node_id", "cluster_id")
	descReady           = nodeDesc("ready", "1 when the node is ready (as /readyz), else 0.")
	descReplicas        = nodeDesc("replicas", "Partition replicas open on this node.")
	descPartitionsLed   = nodeDesc("partitions_led", "Partitions whose local replica leads.")
	descUnderReplicated = nodeDesc("under_replicated_partitions", "Partitions led here with an assigned replica that is not a live member.")
	descGatedReplicas   = nodeDesc("gated_replicas", "Local replicas the vote guard holds back.")
	descControllerLead  = nodeDesc("controller_leader", "1 when this node leads the controller group, else 0.")
	descBrokers         = nodeDesc("live_brokers", "Live members of the cluster as this node sees them.")
)

// nodeCollector is a prometheus.Collector over one node's current state.
type nodeCollector struct{ nd *cluster.Node }

func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descLogStart, descLogEnd, descHighWatermark, descLogSize, descSegments, descTerm, descLeader,
		descGated, descCommitLag, descLastContact, descRecDuration, descRecTruncated,
		descInfo, descReady, descReplicas, descPartitionsLed, descUnderReplicated, descGatedReplicas,
		descControllerLead, descBrokers,
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
	led, gated := 0, 0
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
		gauge(descLogStart, float64(l.StartOffset()), lbl...)
		gauge(descLogEnd, float64(end), lbl...)
		gauge(descHighWatermark, float64(hw), lbl...)
		gauge(descLogSize, float64(l.Size()), lbl...)
		gauge(descSegments, float64(len(l.Segments())), lbl...)
		gauge(descTerm, float64(r.Term()), lbl...)
		gauge(descLeader, b2f(leader), lbl...)
		gauge(descGated, b2f(isGated), lbl...)
		gauge(descCommitLag, float64(max(end-hw, 0)), lbl...)
		if leader {
			gauge(descLastContact, 0, lbl...)
		} else if last := r.Raft().LastContact(); !last.IsZero() {
			gauge(descLastContact, time.Since(last).Seconds(), lbl...)
		}
		rec := l.Recovery()
		gauge(descRecDuration, rec.Duration.Seconds(), lbl...)
		gauge(descRecTruncated, float64(rec.TruncatedBytes), lbl...)
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
	gauge(descControllerLead, b2f(nd.ControllerID() == nd.ID()))
	gauge(descBrokers, float64(len(nd.Brokers())))
}

// metricsHandler serves /metrics from a registry of its own: the node's
// collector and the Go runtime and process collectors.
func metricsHandler(nd *cluster.Node) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		nodeCollector{nd},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:      reg,
		ErrorHandling: promhttp.ContinueOnError,
	}))
}
