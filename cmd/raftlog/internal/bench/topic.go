package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// topicWait bounds how long EnsureTopic waits for a new topic's partitions
// to have leaders.
const topicWait = 30 * time.Second

// EnsureTopic creates c.Topic with c.Partitions and c.Replication when it
// does not exist, and waits until every partition has a leader, so that
// elections are not part of a measurement. It returns the partition count
// (an existing topic keeps its own) and whether the topic was created.
func EnsureTopic(ctx context.Context, c Config) (partitions int32, created bool, err error) {
	if c.Partitions < 1 {
		return 0, false, fmt.Errorf("partitions %d: want at least 1", c.Partitions)
	}
	cl, err := c.client()
	if err != nil {
		return 0, false, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, topicWait)
	defer cancel()
	adm := kadm.NewClient(cl)
	for {
		st, err := topicState(ctx, cl, c.Topic)
		if err == nil {
			switch {
			case st.err == nil && st.leaders:
				return st.partitions, created, nil
			case errors.Is(st.err, kerr.UnknownTopicOrPartition):
				if created {
					break // created, not yet in this broker's metadata
				}
				resp, cerr := adm.CreateTopic(ctx, c.Partitions, c.Replication, nil, c.Topic)
				if cerr == nil {
					cerr = resp.Err
				}
				switch {
				case cerr == nil:
					created = true
				case errors.Is(cerr, kerr.TopicAlreadyExists):
				case retriable(cerr):
					err = cerr
				default:
					return 0, false, fmt.Errorf("create topic %s: %w", c.Topic, cerr)
				}
			default:
				err = st.err
			}
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return 0, created, fmt.Errorf("topic %s not ready (partitions without a leader): %w", c.Topic, err)
		case <-time.After(100 * time.Millisecond): // polling the metadata until the deadline
		}
	}
}

type topicInfo struct {
	partitions int32
	leaders    bool  // every partition has a leader
	err        error // the topic's error code
}

// topicState asks a broker for the topic's metadata, bypassing the
// client's cache (kadm's ListTopics may answer from it for seconds).
func topicState(ctx context.Context, cl *kgo.Client, topic string) (topicInfo, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return topicInfo{}, err
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		st := topicInfo{partitions: int32(len(t.Partitions)), leaders: len(t.Partitions) > 0, err: kerr.ErrorForCode(t.ErrorCode)}
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 || p.Leader < 0 {
				st.leaders = false
			}
		}
		return st, nil
	}
	return topicInfo{err: kerr.UnknownTopicOrPartition}, nil
}

func retriable(err error) bool {
	var ke *kerr.Error
	return errors.As(err, &ke) && ke.Retriable || errors.Is(err, kerr.NotController)
}

// partitionCount asks the metadata how many partitions topic has.
func partitionCount(ctx context.Context, cl *kgo.Client, topic string) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, topicWait)
	defer cancel()
	st, err := topicState(ctx, cl, topic)
	if err == nil {
		err = st.err
	}
	if err != nil {
		return 0, fmt.Errorf("topic %s: %w", topic, err)
	}
	return st.partitions, nil
}

// DeleteTopic deletes c.Topic (a run's data, once measured, only takes
// memory or disk).
func DeleteTopic(ctx context.Context, c Config) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, topicWait)
	defer cancel()
	resp, err := kadm.NewClient(cl).DeleteTopic(ctx, c.Topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("delete topic %s: %w", c.Topic, err)
	}
	return nil
}
