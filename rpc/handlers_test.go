package rpc

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/raftlog/raftlog/log"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestErrCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int16
	}{
		{nil, 0},
		{kerr.NotLeaderForPartition, kerr.NotLeaderForPartition.Code},
		{fmt.Errorf("x: %w", kerr.UnknownTopicOrPartition), kerr.UnknownTopicOrPartition.Code},
		// An error the broker did not map is unknown, whatever it wraps.
		{fmt.Errorf("%w: 9", log.ErrOffsetOutOfRange), kerr.UnknownServerError.Code},
		{fmt.Errorf("append: %w", context.DeadlineExceeded), kerr.RequestTimedOut.Code},
		{context.Canceled, kerr.RequestTimedOut.Code},
		{errors.New("disk on fire"), kerr.UnknownServerError.Code},
		// A kerr wins over what else the chain holds.
		{fmt.Errorf("%w: %w", kerr.NotLeaderForPartition, context.DeadlineExceeded), kerr.NotLeaderForPartition.Code},
	} {
		if got := errCode(tc.err); got != tc.code {
			t.Errorf("errCode(%v) = %d, want %d", tc.err, got, tc.code)
		}
	}
}

// fetchReq is a v12 sessionless fetch of topic's partitions from offset 0.
func fetchReq(topic string, partitions int, maxBytes, partMax int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(12)
	req.MaxBytes, req.SessionEpoch = maxBytes, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	for p := range partitions {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.PartitionMaxBytes = int32(p), partMax
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

func batchesIn(t *testing.T, p []byte) int {
	t.Helper()
	n := 0
	log.Batches(p, func(log.Batch) bool { n++; return true })
	if len(trimBatches(p, len(p))) != len(p) {
		t.Fatalf("partial batch in %d bytes", len(p))
	}
	return n
}

func TestFetchMaxBytes(t *testing.T) {
	b := newMemBroker(t)
	if err := b.CreateTopic(testCtx(t), "", "mb", 3, 1, nil, false); err != nil {
		t.Fatal(err)
	}
	_, addr := startServer(t, b)
	r := dialRaw(t, addr)
	var size int
	for p := range int32(3) {
		for i := range 3 {
			batch := testBatch(10, fmt.Sprintf("p%d-b%d-%0100d", p, i, 0), time.Now().UnixMilli())
			size = len(batch)
			produceRaw(t, r, "mb", p, batch)
		}
	}
	for _, tc := range []struct {
		name              string
		maxBytes, partMax int32
		want              []int // batches per partition
	}{
		{"everything", 1 << 20, 1 << 20, []int{3, 3, 3}},
		{"partition max", 1 << 20, int32(2*size + 10), []int{2, 2, 2}},
		{"total max", int32(4*size + 10), 1 << 20, []int{3, 1, 0}},
		{"first batch whole", 10, 10, []int{1, 0, 0}},
		{"partition max below one batch", 1 << 20, 10, []int{1, 0, 0}},
	} {
		resp := r.roundTrip(fetchReq("mb", 3, tc.maxBytes, tc.partMax)).(*kmsg.FetchResponse)
		for i, sp := range resp.Topics[0].Partitions {
			if sp.ErrorCode != 0 || sp.HighWatermark != 30 || sp.LastStableOffset != 30 || sp.LogStartOffset != 0 || sp.PreferredReadReplica != -1 {
				t.Fatalf("%s: partition %d: %+v", tc.name, i, sp)
			}
			if got := batchesIn(t, sp.RecordBatches); got != tc.want[i] {
				t.Fatalf("%s: partition %d: %d batches, want %d", tc.name, i, got, tc.want[i])
			}
		}
	}
	// Unknown partitions answer their error and leave the others served.
	req := fetchReq("mb", 5, 1<<20, 1<<20)
	resp := r.roundTrip(req).(*kmsg.FetchResponse)
	if ps := resp.Topics[0].Partitions; ps[3].ErrorCode != kerr.UnknownTopicOrPartition.Code || ps[4].ErrorCode != kerr.UnknownTopicOrPartition.Code || batchesIn(t, ps[0].RecordBatches) != 3 {
		t.Fatalf("unknown partitions: %+v", ps)
	}
}

func TestRawAdmin(t *testing.T) {
	b := newMemBroker(t)
	ctx := testCtx(t)
	if err := b.CreateTopic(ctx, "", "t", 1, 1, nil, false); err != nil {
		t.Fatal(err)
	}
	_, addr := startServer(t, b)
	r := dialRaw(t, addr)

	// Metadata by topic id (v10+).
	id := b.Topics([]string{"t"})[0].ID
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	md.Topics = []kmsg.MetadataRequestTopic{{TopicID: id}, {TopicID: [16]byte{9}}}
	mresp := r.roundTrip(md).(*kmsg.MetadataResponse)
	if len(mresp.Topics) != 2 || mresp.Topics[0].Topic == nil || *mresp.Topics[0].Topic != "t" || mresp.Topics[0].TopicID != id ||
		mresp.Topics[1].ErrorCode != kerr.UnknownTopicID.Code || mresp.Topics[1].Topic != nil {
		t.Fatalf("metadata by id: %+v", mresp.Topics)
	}
	// v0: an empty list is every topic; v1+: none.
	md = kmsg.NewPtrMetadataRequest()
	md.SetVersion(0)
	if resp := r.roundTrip(md).(*kmsg.MetadataResponse); len(resp.Topics) != 1 {
		t.Fatalf("v0 empty list: %+v", resp.Topics)
	}
	md.SetVersion(1)
	md.Topics = []kmsg.MetadataRequestTopic{}
	if resp := r.roundTrip(md).(*kmsg.MetadataResponse); len(resp.Topics) != 0 {
		t.Fatalf("v1 empty list: %+v", resp.Topics)
	}
	// v3 auto-creates (as Kafka before AllowAutoTopicCreation existed).
	md.SetVersion(3)
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("old-auto")}, {Topic: kmsg.StringPtr("bad name")}}
	resp := r.roundTrip(md).(*kmsg.MetadataResponse)
	if resp.Topics[0].ErrorCode != 0 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[1].ErrorCode != kerr.InvalidTopicException.Code {
		t.Fatalf("v3 auto-create: %+v", resp.Topics)
	}

	// CreateTopics: duplicates, manual assignment, null config values.
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.SetVersion(7)
	ct.TimeoutMillis = 5000
	ct.Topics = []kmsg.CreateTopicsRequestTopic{
		{Topic: "dup", NumPartitions: 1, ReplicationFactor: 1},
		{Topic: "dup", NumPartitions: 1, ReplicationFactor: 1},
		{Topic: "manual", NumPartitions: -1, ReplicationFactor: -1, ReplicaAssignment: []kmsg.CreateTopicsRequestTopicReplicaAssignment{{Partition: 0, Replicas: []int32{1}}}},
		{Topic: "nullcfg", NumPartitions: 1, ReplicationFactor: 1, Configs: []kmsg.CreateTopicsRequestTopicConfig{{Name: "retention.ms"}}},
		{Topic: "defaults", NumPartitions: -1, ReplicationFactor: -1},
	}
	ctr := r.roundTrip(ct).(*kmsg.CreateTopicsResponse)
	for i, want := range []int16{kerr.InvalidRequest.Code, kerr.InvalidRequest.Code, kerr.InvalidReplicaAssignment.Code, kerr.InvalidConfig.Code, 0} {
		if got := ctr.Topics[i]; got.ErrorCode != want || (want != 0) != (got.ErrorMessage != nil) {
			t.Fatalf("create %s: %+v, want error %d", got.Topic, got, want)
		}
	}
	if d := ctr.Topics[4]; d.NumPartitions != 1 || d.ReplicationFactor != 1 || len(d.Configs) != len(topicDefaults) || d.TopicID == [16]byte{} {
		t.Fatalf("defaults: %+v", d)
	}

	// DescribeConfigs: names filter, broker resources, unknown types.
	dc := kmsg.NewPtrDescribeConfigsRequest()
	dc.SetVersion(4)
	dc.Resources = []kmsg.DescribeConfigsRequestResource{
		{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: "t", ConfigNames: []string{"retention.ms"}},
		{ResourceType: kmsg.ConfigResourceTypeBroker, ResourceName: ""},
		{ResourceType: kmsg.ConfigResourceTypeBroker, ResourceName: "2"},
		{ResourceType: kmsg.ConfigResourceTypeGroupConfig, ResourceName: "g"},
	}
	dcr := r.roundTrip(dc).(*kmsg.DescribeConfigsResponse)
	if rr := dcr.Resources[0]; rr.ErrorCode != 0 || len(rr.Configs) != 1 || rr.Configs[0].Name != "retention.ms" {
		t.Fatalf("topic configs: %+v", rr)
	}
	for i, want := range []int16{0, 0, kerr.InvalidRequest.Code, kerr.InvalidRequest.Code} {
		if dcr.Resources[i].ErrorCode != want {
			t.Fatalf("resource %d: %+v, want error %d", i, dcr.Resources[i], want)
		}
	}

	// IncrementalAlterConfigs: broker no-op, broker change, bad op.
	ia := kmsg.NewPtrIncrementalAlterConfigsRequest()
	ia.SetVersion(1)
	ia.Resources = []kmsg.IncrementalAlterConfigsRequestResource{
		{ResourceType: kmsg.ConfigResourceTypeBroker, ResourceName: "1"},
		{ResourceType: kmsg.ConfigResourceTypeBroker, ResourceName: "",
			Configs: []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "log.retention.ms", Value: kmsg.StringPtr("1")}}},
		{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: "t",
			Configs: []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "retention.ms", Op: 7, Value: kmsg.StringPtr("1")}}},
		{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: "missing",
			Configs: []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "retention.ms", Value: kmsg.StringPtr("1")}}},
	}
	iar := r.roundTrip(ia).(*kmsg.IncrementalAlterConfigsResponse)
	for i, want := range []int16{0, kerr.InvalidRequest.Code, kerr.InvalidRequest.Code, kerr.UnknownTopicOrPartition.Code} {
		if iar.Resources[i].ErrorCode != want {
			t.Fatalf("alter resource %d: %+v, want error %d", i, iar.Resources[i], want)
		}
	}

	// ListOffsets: max timestamp needs v7.
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.SetVersion(6)
	lo.Topics = []kmsg.ListOffsetsRequestTopic{{Topic: "t", Partitions: []kmsg.ListOffsetsRequestTopicPartition{{Timestamp: -3, CurrentLeaderEpoch: -1}}}}
	if sp := r.roundTrip(lo).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]; sp.ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("max timestamp at v6: %+v", sp)
	}
	lo.SetVersion(7)
	if sp := r.roundTrip(lo).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]; sp.ErrorCode != 0 || sp.Offset != -1 || sp.Timestamp != -1 {
		t.Fatalf("max timestamp of an empty partition: %+v", sp)
	}

	// DeleteRecords -1: up to the high watermark.
	produceRaw(t, r, "t", 0, testBatch(4, "x", time.Now().UnixMilli()))
	dr := kmsg.NewPtrDeleteRecordsRequest()
	dr.SetVersion(2)
	dr.Topics = []kmsg.DeleteRecordsRequestTopic{{Topic: "t", Partitions: []kmsg.DeleteRecordsRequestTopicPartition{{Offset: -1}, {Partition: 3, Offset: 0}}}}
	drr := r.roundTrip(dr).(*kmsg.DeleteRecordsResponse)
	if ps := drr.Topics[0].Partitions; ps[0].ErrorCode != 0 || ps[0].LowWatermark != 4 || ps[1].ErrorCode != kerr.UnknownTopicOrPartition.Code || ps[1].LowWatermark != -1 {
		t.Fatalf("delete records: %+v", ps)
	}

	// InitProducerID: idempotent ids differ; the broker refuses
	// transactions.
	ip := kmsg.NewPtrInitProducerIDRequest()
	ip.SetVersion(4)
	first := r.roundTrip(ip).(*kmsg.InitProducerIDResponse)
	second := r.roundTrip(ip).(*kmsg.InitProducerIDResponse)
	if first.ErrorCode != 0 || second.ErrorCode != 0 || first.ProducerID == second.ProducerID || first.ProducerID < 0 {
		t.Fatalf("producer ids: %+v %+v", first, second)
	}
	// An epoch bump keeps the id; v2 cannot ask for one.
	ip.ProducerID, ip.ProducerEpoch = first.ProducerID, first.ProducerEpoch
	if resp := r.roundTrip(ip).(*kmsg.InitProducerIDResponse); resp.ErrorCode != 0 || resp.ProducerID != first.ProducerID || resp.ProducerEpoch != first.ProducerEpoch+1 {
		t.Fatalf("epoch bump of %+v: %+v", first, resp)
	}
	ip.SetVersion(2)
	if resp := r.roundTrip(ip).(*kmsg.InitProducerIDResponse); resp.ErrorCode != 0 || resp.ProducerID == first.ProducerID {
		t.Fatalf("v2 with an id must get a fresh one: %+v", resp)
	}
	ip.SetVersion(4)
	ip.ProducerID, ip.ProducerEpoch = -1, -1
	ip.TransactionalID = kmsg.StringPtr("tx")
	if resp := r.roundTrip(ip).(*kmsg.InitProducerIDResponse); resp.ErrorCode != kerr.TransactionalIDAuthorizationFailed.Code || resp.ProducerID != -1 {
		t.Fatalf("transactional: %+v", resp)
	}
}

// A response's error message is the detail: the text of the error code
// it wraps is not said again (clients print it before the message).
func TestErrMessage(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: node 9 is not a live member", kerr.InvalidReplicaAssignment), "node 9 is not a live member"},
		{kerr.UnknownTopicOrPartition, kerr.UnknownTopicOrPartition.Description},
		{errors.New("disk on fire"), "disk on fire"},
		{fmt.Errorf("moving: %w", kerr.NotController), "moving: " + kerr.NotController.Error()},
	} {
		if got := errMessage(c.err); got == nil || *got != c.want {
			t.Errorf("errMessage(%v) = %v, want %q", c.err, got, c.want)
		}
	}
	if errMessage(nil) != nil {
		t.Error("a message without an error")
	}
}
