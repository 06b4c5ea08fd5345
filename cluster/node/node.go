// Package node assembles one running raftlog node: the cluster member
// (membership, controller, partition replicas), the Kafka front end wired
// to it, and the HTTP listener of /healthz, /readyz, /metrics and
// /v1/status. `raftlog serve`, `raftlog dev`, the benchmark clusters and
// the in-process test clusters all start nodes through Start.
package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlog/raftlog/cluster"
	"github.com/raftlog/raftlog/rpc"
)

// Config is one node's configuration: the cluster member's, and the
// listeners this package adds to it.
type Config struct {
	// Cluster configures the member. Its AdvertisedKafkaAddr defaults to
	// the Kafka listener's address and its HTTPAddr (the address tools
	// reach the HTTP listener at) to the HTTP listener's.
	Cluster cluster.Config
	// KafkaAddr is the Kafka listener's address.
	KafkaAddr string
	// HTTPAddr is the HTTP listener's address.
	HTTPAddr string
	// Groups configures the group coordinator (zero: rpc's defaults).
	Groups rpc.GroupConfig
	// Pprof serves Go's profiles under /debug/pprof/ on the HTTP listener.
	Pprof bool
}

// Node is a running node. It is a cluster member (the embedded
// *cluster.Node) with its Kafka and HTTP listeners.
type Node struct {
	*cluster.Node
	rpc       *rpc.Server
	http      *http.Server
	kafkaAddr string
	httpAddr  string
	closeOnce sync.Once
	closeErr  error
}

// Start starts a node: it listens on the Kafka and HTTP addresses, starts
// the cluster member, and serves both listeners. It returns once the
// member has started; Node.WaitReady waits until it can serve.
func Start(cfg Config) (*Node, error) {
	cc := cfg.Cluster
	if cc.NodeID < 0 {
		return nil, errors.New("node id must be ≥ 0")
	}
	if cc.Logger == nil {
		cc.Logger = hclog.NewNullLogger()
	}
	kln, err := net.Listen("tcp", cfg.KafkaAddr)
	if err != nil {
		return nil, fmt.Errorf("kafka listener: %w", err)
	}
	hln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		kln.Close()
		return nil, fmt.Errorf("http listener: %w", err)
	}
	cc.AdvertisedKafkaAddr = cmp.Or(cc.AdvertisedKafkaAddr, kln.Addr().String())
	cc.HTTPAddr = cmp.Or(cc.HTTPAddr, hln.Addr().String())
	cn, err := cluster.Start(cc)
	if err != nil {
		kln.Close()
		hln.Close()
		return nil, err
	}
	logger := cc.Logger
	km := newKafkaMetrics()
	srv := rpc.NewServer(broker{cn}, rpc.WithLogger(logger.Named("kafka")), rpc.WithObserver(km),
		rpc.WithGroupConfig(cfg.Groups))
	go srv.Serve(kln)
	hs := &http.Server{Handler: httpHandler(cn, km, cfg.Pprof), ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(hln)
	logger.Info("node started", "kafka", cc.AdvertisedKafkaAddr, "raft", cc.RaftAddr, "gossip", cc.GossipAddr, "http", hln.Addr().String())
	return &Node{Node: cn, rpc: srv, http: hs, kafkaAddr: kln.Addr().String(), httpAddr: hln.Addr().String()}, nil
}

// KafkaAddr is the address the Kafka listener is bound to.
func (n *Node) KafkaAddr() string { return n.kafkaAddr }

// HTTPAddr is the address the HTTP listener is bound to.
func (n *Node) HTTPAddr() string { return n.httpAddr }

// Close stops the node cleanly: the HTTP and Kafka listeners, then the
// member. Later calls return the first call's error.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.http.Shutdown(ctx)
		n.rpc.Close()
		n.closeErr = n.Node.Close()
	})
	return n.closeErr
}

// Kill stops the node as a crash would: the member stops without a clean
// shutdown (cluster.Node.Kill), and the listeners close at once.
func (n *Node) Kill() {
	n.closeOnce.Do(func() {
		n.Node.Kill()
		n.http.Close()
		n.rpc.Close()
	})
}

// httpHandler serves /healthz, /readyz, /metrics, /v1/status and, with
// withPprof, Go's profiles.
func httpHandler(nd *cluster.Node, km *kafkaMetrics, withPprof bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if ok, why := nd.Ready(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("/metrics", metricsHandler(nd, km))
	mux.Handle("/v1/status", statusHandler(nd))
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// BootID reads the kernel boot id from path ("" when it cannot be read):
// the vote guard's way to tell a process restart from a reboot.
func BootID(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
