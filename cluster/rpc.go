package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/replication"
	"github.com/twmb/franz-go/pkg/kerr"
)

// The cluster channel: nodes ask each other over the transport's group
// "__cluster", one JSON request and one JSON response per stream. Any
// node takes an admin request, checks it against its own copy of the
// metadata and hands the command to the controller's leader ("append");
// the leader balancer asks for reports and transfers (balance.go), a
// rejoining node for gossip addresses (rejoin.go).
const clusterRPCGroup = "__cluster"

type rpcRequest struct {
	Op  string  `json:"op"`
	Cmd command `json:"cmd"`
	// transfer (balance.go): hand the leadership of Group to node To.
	Group string `json:"group,omitempty"`
	To    int32  `json:"to,omitempty"`
	// hosted (reconcile.go): which of Groups the node has open.
	Groups []string `json:"groups,omitempty"`
}

type rpcResponse struct {
	Offset int64       `json:"offset"`
	Err    string      `json:"err,omitempty"`
	Code   int16       `json:"code,omitempty"`
	Report *nodeReport `json:"report,omitempty"` // report (balance.go)
	// gossip (rejoin.go): the answering node and its gossip address.
	Node   int32  `json:"node,omitempty"`
	Gossip string `json:"gossip,omitempty"`
	// hosted: the groups asked of that the node has open.
	Hosted []string `json:"hosted,omitempty"`
}

// serveRPC answers the cluster channel until the node closes.
func (n *Node) serveRPC() {
	defer n.wg.Done()
	for {
		c, err := n.rpcLayer.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			var req rpcRequest
			if err := json.NewDecoder(bufio.NewReader(c)).Decode(&req); err != nil {
				return
			}
			var resp rpcResponse
			switch req.Op {
			case "append":
				ctx, cancel := context.WithTimeout(n.ctx, 20*time.Second)
				off, err := n.ctl.appendCommand(ctx, req.Cmd)
				cancel()
				resp.Offset = off
				if err != nil {
					resp.Err = err.Error()
					var nl *replication.NotLeaderError
					if errors.As(err, &nl) {
						resp.Code = kerr.NotController.Code
					}
				}
			default:
				resp = n.handleRPC(req)
			}
			json.NewEncoder(c).Encode(resp)
		}()
	}
}

// handleRPC serves the cluster RPC ops other than "append".
func (n *Node) handleRPC(req rpcRequest) rpcResponse {
	switch req.Op {
	case "report":
		return rpcResponse{Report: n.localReport()}
	case "gossip":
		return rpcResponse{Node: n.cfg.NodeID, Gossip: n.gossipAddr}
	case "transfer":
		if err := n.transferLocal(req.Group, req.To); err != nil {
			return rpcResponse{Err: err.Error()}
		}
		return rpcResponse{}
	case "hosted":
		var open []string
		n.mu.Lock()
		for _, g := range req.Groups {
			if n.replicas[g] != nil {
				open = append(open, g)
			}
		}
		n.mu.Unlock()
		return rpcResponse{Hosted: open}
	}
	return rpcResponse{Err: unknownOp + req.Op}
}

// unknownOp starts the answer to an op the node does not serve.
const unknownOp = "unknown op "

// call sends one cluster RPC to the node at addr.
func (n *Node) call(ctx context.Context, addr raft.ServerAddress, req rpcRequest) (rpcResponse, error) {
	conn, err := n.mux.Dial(clusterRPCGroup, addr, 5*time.Second)
	if err != nil {
		return rpcResponse{}, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	} else {
		conn.SetDeadline(time.Now().Add(30 * time.Second))
	}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return rpcResponse{}, err
	}
	var resp rpcResponse
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&resp); err != nil {
		return rpcResponse{}, err
	}
	return resp, nil
}
