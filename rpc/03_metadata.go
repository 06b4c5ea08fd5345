package rpc

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Metadata: v0–12.
//
// Answers the brokers, the cluster id (v2+), the controller id (v1+) and
// the requested topics: every topic for a null list (v1+) or an empty one
// (v0), none for an empty list (v1+). The brokers are the live ones and
// every other one the answer names (a leader, replica or the controller)
// that Broker.LookupBroker knows, at its registered address: an answer
// never names a leader or controller it does not list (one it cannot
// look up is answered as none: leader -1 with LEADER_NOT_AVAILABLE,
// controller -1); a replica it cannot look up stays in the replicas, as
// Kafka lists offline replicas. Each topic has its error, name,
// id (v10+), internal flag (v1+) and partitions with their error, leader,
// leader epoch (v7+), replicas, ISR and offline replicas (v5+).
//
// Topics may be named by id (v10+): an unknown id is answered with
// UNKNOWN_TOPIC_ID and a null name.
//
// Auto creation: an unknown topic requested with AllowAutoTopicCreation
// (v4+; always on v0–3, as Kafka) is created with CreateTopic(name, -1,
// -1) — the broker decides whether it allows it — and reported; while it
// has no partition with a leader yet, with LEADER_NOT_AVAILABLE, so the
// client asks again.
//
// Authorized operations (v8+) are not computed: answered as "not
// requested" (-2147483648).
func (s *Server) metadata(c *call, req *kmsg.MetadataRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	bs := s.newBrokerSet()
	defer func() { // the brokers, once the topics have named theirs
		for _, b := range bs.list {
			rb := kmsg.NewMetadataResponseBroker()
			rb.NodeID, rb.Host, rb.Port, rb.Rack = b.NodeID, b.Host, b.Port, b.Rack
			resp.Brokers = append(resp.Brokers, rb)
		}
	}()
	cluster := s.b.ClusterID()
	resp.ClusterID = &cluster
	resp.ControllerID = bs.nameOr(s.b.ControllerID())

	all := req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0)
	if all {
		for _, t := range s.b.Topics(nil) {
			if t.Err != nil {
				continue
			}
			resp.Topics = append(resp.Topics, s.metadataTopic(t, nil, bs))
		}
		return resp, nil
	}

	autoCreate := req.AllowAutoTopicCreation || req.Version < 4
	// Answers in request order: an unknown id answers in its place.
	type slot struct {
		name  string
		unkID *[16]byte
	}
	var (
		byID  map[[16]byte]string
		seen  = make(map[string]bool, len(req.Topics))
		slots []slot
		names []string
	)
	for _, rt := range req.Topics {
		var name string
		switch {
		case req.Version >= 10 && rt.TopicID != [16]byte{}:
			if byID == nil {
				byID = topicIDs(s.b)
			}
			n, ok := byID[rt.TopicID]
			if !ok {
				id := rt.TopicID
				slots = append(slots, slot{unkID: &id})
				continue
			}
			name = n
		case rt.Topic != nil:
			name = *rt.Topic
		default:
			continue
		}
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
			slots = append(slots, slot{name: name})
		}
	}
	infos := make(map[string]TopicInfo, len(names))
	if len(names) > 0 {
		for _, t := range s.b.Topics(names) {
			infos[t.Name] = t
		}
	}
	for _, sl := range slots {
		if sl.unkID != nil {
			mt := kmsg.NewMetadataResponseTopic()
			mt.TopicID = *sl.unkID
			mt.ErrorCode = kerr.UnknownTopicID.Code
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		t, ok := infos[sl.name]
		if !ok {
			t = TopicInfo{Name: sl.name, Err: kerr.UnknownTopicOrPartition}
		}
		if t.Err != nil && autoCreate && errors.Is(t.Err, kerr.UnknownTopicOrPartition) {
			resp.Topics = append(resp.Topics, s.autoCreate(c, sl.name, bs))
			continue
		}
		resp.Topics = append(resp.Topics, s.metadataTopic(t, nil, bs))
	}
	return resp, nil
}

// autoCreate creates an unknown topic a Metadata request asked for and
// describes it.
func (s *Server) autoCreate(c *call, name string, bs *brokerSet) kmsg.MetadataResponseTopic {
	ctx, cancel := context.WithTimeout(c.ctx, defaultTimeout)
	defer cancel()
	err := s.b.CreateTopic(ctx, c.requester(), name, -1, -1, nil, false)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		s.logger.Debug("auto topic creation failed", "topic", name, "error", err)
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic = &name
		mt.ErrorCode = s.code(err)
		return mt
	}
	if err == nil {
		s.logger.Info("auto-created topic", "topic", name, "client_id", c.clientID)
	}
	infos := s.b.Topics([]string{name})
	if len(infos) == 0 || infos[0].Err != nil {
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic = &name
		mt.ErrorCode = kerr.LeaderNotAvailable.Code
		return mt
	}
	mt := s.metadataTopic(infos[0], nil, bs)
	led := false
	for _, p := range mt.Partitions {
		led = led || p.Leader >= 0
	}
	if !led {
		mt.ErrorCode = kerr.LeaderNotAvailable.Code
	}
	return mt
}

// metadataTopic describes t, listing in bs every broker it names;
// topicErr, when set, overrides its error.
func (s *Server) metadataTopic(t TopicInfo, topicErr error, bs *brokerSet) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	name := t.Name
	mt.Topic = &name
	if topicErr == nil {
		topicErr = t.Err
	}
	mt.ErrorCode = s.code(topicErr)
	if t.Err != nil {
		return mt
	}
	mt.TopicID = t.ID
	mt.IsInternal = t.Internal
	for _, p := range t.Partitions {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition = p.Partition
		mp.ErrorCode = s.code(p.Err)
		mp.Leader = p.Leader
		mp.LeaderEpoch = p.LeaderEpoch
		if p.Leader >= 0 && !bs.name(p.Leader) {
			// A leader no answer could list: the client asks again.
			mp.Leader = -1
			if p.Err == nil {
				mp.ErrorCode = kerr.LeaderNotAvailable.Code
			}
		}
		bs.nameAll(p.Replicas)
		bs.nameAll(p.ISR)
		bs.nameAll(p.Offline)
		mp.Replicas = nonNil(p.Replicas)
		mp.ISR = nonNil(p.ISR)
		mp.OfflineReplicas = nonNil(p.Offline)
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}

// topicIDs maps every topic's id to its name.
func topicIDs(b Broker) map[[16]byte]string {
	m := make(map[[16]byte]string)
	for _, t := range b.Topics(nil) {
		if t.Err == nil && t.ID != [16]byte{} {
			m[t.ID] = t.Name
		}
	}
	return m
}

func nonNil(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}

// brokerSet gathers the brokers an answer lists: the live ones, and
// every other one it names that Broker.LookupBroker knows.
type brokerSet struct {
	b    Broker
	list []BrokerInfo
	seen map[int32]bool // listed, or looked up in vain
	has  map[int32]bool // listed
}

func (s *Server) newBrokerSet() *brokerSet {
	bs := &brokerSet{b: s.b, list: s.b.Brokers(), seen: map[int32]bool{}, has: map[int32]bool{}}
	for _, b := range bs.list {
		bs.seen[b.NodeID], bs.has[b.NodeID] = true, true
	}
	return bs
}

// name lists broker id when it can be: true when it is listed.
func (bs *brokerSet) name(id int32) bool {
	if id < 0 {
		return false
	}
	if !bs.seen[id] {
		bs.seen[id] = true
		if b, ok := bs.b.LookupBroker(id); ok && b.NodeID == id {
			bs.list = append(bs.list, b)
			bs.has[id] = true
		}
	}
	return bs.has[id]
}

// nameOr is id when it can be listed, else -1.
func (bs *brokerSet) nameOr(id int32) int32 {
	if bs.name(id) {
		return id
	}
	return -1
}

func (bs *brokerSet) nameAll(ids []int32) {
	for _, id := range ids {
		bs.name(id)
	}
}
