package rpc

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fuzzSeeds are valid requests (header and body, no size prefix) of every
// key, plus a little junk.
func fuzzSeeds() map[string][]byte {
	enc := kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz"))
	frame := func(req kmsg.Request) []byte { return enc.AppendRequest(nil, req, 1)[4:] }
	seeds := map[string][]byte{
		"junk":        []byte("\x00\x03\x00\x0c\x00\x00\x00\x01\xff\xff\x00\x00"),
		"empty":       {},
		"unknown-key": []byte("\x03\xe7\x00\x00\x00\x00\x00\x01\x00\x00"),
	}
	ts := time.UnixMilli(1700000000000).UnixMilli()
	for key, h := range handlers {
		for _, v := range []int16{h.min, h.max} {
			req := kmsg.RequestForKey(key)
			req.SetVersion(v)
			switch r := req.(type) {
			case *kmsg.ProduceRequest:
				r.Acks, r.TimeoutMillis = -1, 1000
				rp := kmsg.NewProduceRequestTopicPartition()
				rp.Records = testBatch(2, "seed", ts)
				r.Topics = []kmsg.ProduceRequestTopic{{Topic: "fuzz", Partitions: []kmsg.ProduceRequestTopicPartition{rp}}}
			case *kmsg.FetchRequest:
				r.MaxWaitMillis, r.MinBytes, r.MaxBytes, r.SessionEpoch = 500, 1, 1<<20, -1
				rp := kmsg.NewFetchRequestTopicPartition()
				rp.PartitionMaxBytes = 1 << 20
				r.Topics = []kmsg.FetchRequestTopic{{Topic: "fuzz", Partitions: []kmsg.FetchRequestTopicPartition{rp}}}
			case *kmsg.ListOffsetsRequest:
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Timestamp = ts
				r.Topics = []kmsg.ListOffsetsRequestTopic{{Topic: "fuzz", Partitions: []kmsg.ListOffsetsRequestTopicPartition{rp}}}
			case *kmsg.MetadataRequest:
				r.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("fuzz")}, {Topic: kmsg.StringPtr("auto")}}
				r.AllowAutoTopicCreation = true
			case *kmsg.ApiVersionsRequest:
				r.ClientSoftwareName, r.ClientSoftwareVersion = "fuzz", "1"
			case *kmsg.CreateTopicsRequest:
				r.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "made", NumPartitions: 2, ReplicationFactor: 1}}
			case *kmsg.DeleteTopicsRequest:
				r.TopicNames = []string{"made"}
				r.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: kmsg.StringPtr("made")}}
			case *kmsg.DeleteRecordsRequest:
				r.Topics = []kmsg.DeleteRecordsRequestTopic{{Topic: "fuzz", Partitions: []kmsg.DeleteRecordsRequestTopicPartition{{Offset: 1}}}}
			case *kmsg.OffsetForLeaderEpochRequest:
				rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
				rp.LeaderEpoch = 1
				r.Topics = []kmsg.OffsetForLeaderEpochRequestTopic{{Topic: "fuzz", Partitions: []kmsg.OffsetForLeaderEpochRequestTopicPartition{rp}}}
			case *kmsg.DescribeConfigsRequest:
				r.Resources = []kmsg.DescribeConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: "fuzz"}}
			case *kmsg.CreatePartitionsRequest:
				r.Topics = []kmsg.CreatePartitionsRequestTopic{{Topic: "fuzz", Count: 3}}
			case *kmsg.IncrementalAlterConfigsRequest:
				r.Resources = []kmsg.IncrementalAlterConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: "fuzz",
					Configs: []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "retention.ms", Value: kmsg.StringPtr("5")}}}}
			case *kmsg.FindCoordinatorRequest:
				r.CoordinatorKey, r.CoordinatorKeys = "g", []string{"g", "h"}
			case *kmsg.JoinGroupRequest:
				*r = *joinReq(v, "g", "", kmsg.StringPtr("i"))
			case *kmsg.SyncGroupRequest:
				r.Group, r.MemberID, r.Generation = "g", "i-1", 1
				r.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: "i-1", MemberAssignment: consumerAssignment("fuzz", 0)}}
			case *kmsg.HeartbeatRequest:
				r.Group, r.MemberID, r.Generation = "g", "i-1", 1
			case *kmsg.LeaveGroupRequest:
				r.Group, r.MemberID = "g", "i-1"
				r.Members = []kmsg.LeaveGroupRequestMember{{MemberID: "i-1", InstanceID: kmsg.StringPtr("i")}}
			case *kmsg.OffsetCommitRequest:
				r.Group = "g"
				r.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "fuzz", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Offset: 1, LeaderEpoch: -1}}}}
			case *kmsg.OffsetFetchRequest:
				r.Group = "g"
				r.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "fuzz", Partitions: []int32{0, 1}}}
				r.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "g"}, {Group: "h", Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "fuzz", Partitions: []int32{0}}}}}
			case *kmsg.DescribeGroupsRequest:
				r.Groups = []string{"g", "h"}
			case *kmsg.ListGroupsRequest:
				r.StatesFilter = []string{"Stable"}
			case *kmsg.DeleteGroupsRequest:
				r.Groups = []string{"g"}
			case *kmsg.OffsetDeleteRequest:
				r.Group = "g"
				r.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: "fuzz", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}}}
			}
			seeds[fmt.Sprintf("%s-v%d", kmsg.NameForKey(key), v)] = frame(req)
		}
	}
	return seeds
}

// FuzzRequest feeds arbitrary bytes to the request dispatch as one
// request: nothing may panic, and an answer must be a well-formed frame.
func FuzzRequest(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	b := newMemBroker(f)
	b.maxTopics = 8
	if err := b.CreateTopic(context.Background(), "", "fuzz", 2, 1, nil, false); err != nil {
		f.Fatal(err)
	}
	s := NewServer(b, WithLogger(hclog.NewNullLogger()))
	f.Cleanup(func() { s.Close() })
	// Long polls end at once: the poll context is already done.
	done, cancel := context.WithCancel(context.Background())
	cancel()

	f.Fuzz(func(t *testing.T, data []byte) {
		// A short bound: an input that waits (a produce timeout, a long
		// poll) must not stall the fuzzer past its deadline.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		c := &call{ctx: ctx, poll: done, start: time.Now()}
		out, err := s.handle(c, data, nil)
		if err != nil {
			if out != nil {
				t.Fatal("an error and an answer")
			}
			return
		}
		if out == nil {
			return // acks=0
		}
		if len(out) < 8 || int(binary.BigEndian.Uint32(out)) != len(out)-4 {
			t.Fatalf("malformed answer frame: % x", out[:min(len(out), 16)])
		}
	})
}

// TestWriteFuzzSeeds rewrites testdata/fuzz/FuzzRequest from fuzzSeeds
// when RPC_WRITE_FUZZ_SEEDS is set.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("RPC_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set RPC_WRITE_FUZZ_SEEDS=1 to rewrite the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzRequest")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, seed := range fuzzSeeds() {
		body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(seed)) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
