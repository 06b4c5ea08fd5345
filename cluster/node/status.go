package node

import (
	"encoding/json"
	"net/http"

	"github.com/raftlog/raftlog/cluster"
)

// GET /v1/status: what one node knows of itself and its replicas, as JSON;
// `raftlog cluster status` and `raftlog partition reassign` gather it
// from every node.

// Status is a node's answer to GET /v1/status.
type Status struct {
	NodeID       int32           `json:"node_id"`
	ClusterID    string          `json:"cluster_id"`
	Ready        bool            `json:"ready"`
	Reason       string          `json:"reason,omitempty"`
	ControllerID int32           `json:"controller_id"` // -1: no controller leader known
	Brokers      []BrokerStatus  `json:"brokers"`       // live members as this node sees them
	Replicas     []ReplicaStatus `json:"replicas"`      // local partition replicas
}

// BrokerStatus is a live member as the answering node sees it.
type BrokerStatus struct {
	NodeID    int32  `json:"node_id"`
	KafkaAddr string `json:"kafka_addr"`
	HTTPAddr  string `json:"http_addr"`
	Rack      string `json:"rack,omitempty"`
}

// ReplicaStatus is one local partition replica.
type ReplicaStatus struct {
	Topic          string  `json:"topic"`
	Partition      int32   `json:"partition"`
	Replicas       []int32 `json:"replicas"` // the assignment
	Leader         int32   `json:"leader"`   // -1: none known
	Term           uint64  `json:"term"`
	HighWatermark  int64   `json:"high_watermark"`
	LogStartOffset int64   `json:"log_start_offset"`
	EndOffset      int64   `json:"end_offset"`
	Gated          bool    `json:"gated"`
	GateReason     string  `json:"gate_reason,omitempty"`
	WriteError     string  `json:"write_error,omitempty"` // what stopped the log until it is reopened
}

// CurrentStatus is what nd knows of itself now.
func CurrentStatus(nd *cluster.Node) Status {
	ready, why := nd.Ready()
	st := Status{NodeID: nd.ID(), ClusterID: nd.Meta().ClusterID(), Ready: ready, Reason: why,
		ControllerID: nd.ControllerID(), Brokers: []BrokerStatus{}, Replicas: []ReplicaStatus{}}
	for _, b := range nd.Brokers() {
		st.Brokers = append(st.Brokers, BrokerStatus{NodeID: b.NodeID, KafkaAddr: b.KafkaAddr, HTTPAddr: b.HTTPAddr, Rack: b.Rack})
	}
	for _, lr := range nd.LocalReplicas() {
		r := lr.Replica
		leader, _ := nd.Leader(lr.Topic, lr.Partition)
		st.Replicas = append(st.Replicas, ReplicaStatus{
			Topic: lr.Topic, Partition: lr.Partition, Replicas: lr.Replicas, Leader: leader, Term: r.Term(),
			HighWatermark: r.HighWatermark(), LogStartOffset: r.Log().StartOffset(), EndOffset: r.Log().EndOffset(),
			Gated: r.Gated(), GateReason: r.GateReason(), WriteError: errText(r.WriteError()),
		})
	}
	return st
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func statusHandler(nd *cluster.Node) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(CurrentStatus(nd))
	}
}
