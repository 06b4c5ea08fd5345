package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestRetriedCreateWindow: a creation counts as retried only by the
// same fingerprint and within RetryWindow of the first.
func TestRetriedCreateWindow(t *testing.T) {
	fp := createFingerprint("app@/127.0.0.1", 3, 3, map[string]string{"a": "1", "b": "2"})
	if again := createFingerprint("app@/127.0.0.1", 3, 3, map[string]string{"b": "2", "a": "1"}); again != fp {
		t.Fatal("the fingerprint depends on the configs' order")
	}
	now := time.Now()
	for _, tc := range []struct {
		created time.Time
		creator string
		want    error
	}{
		{now.Add(-time.Second), fp, nil},
		{now.Add(-RetryWindow - time.Second), fp, kerr.TopicAlreadyExists},
		{now.Add(-time.Second), "", kerr.TopicAlreadyExists},
	} {
		topic := Topic{Name: "t", Creator: tc.creator, Created: tc.created.UnixMilli()}
		if err := retriedCreate(topic, fp); !errors.Is(err, tc.want) {
			t.Errorf("created %v ago by %q: %v, want %v", now.Sub(tc.created).Round(time.Second), tc.creator, err, tc.want)
		}
	}
	if err := retriedCreate(Topic{Name: "t"}, ""); !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Errorf("no fingerprint on either side: %v", err)
	}
}
