package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Result is what one produce or consume run measured.
type Result struct {
	Kind       string  `json:"kind"` // "produce" or "consume"
	Topic      string  `json:"topic"`
	Partitions int32   `json:"partitions"`
	Size       int     `json:"size,omitempty"` // bytes per value (produce)
	Acks       string  `json:"acks,omitempty"`
	Producers  int     `json:"producers,omitempty"`
	TargetRate float64 `json:"target_rate,omitempty"` // records/s asked for (0: unlimited)

	Records       int64         `json:"records"` // acknowledged (produce) or received (consume)
	Bytes         int64         `json:"bytes"`   // value bytes of those records
	Errors        int64         `json:"errors"`  // failed records (produce) or fetch errors (consume)
	FirstError    string        `json:"first_error,omitempty"`
	Elapsed       time.Duration `json:"elapsed_ns"`
	RecordsPerSec float64       `json:"records_per_sec"`
	MBPerSec      float64       `json:"mb_per_sec"` // 10^6 value bytes per second

	// Latency is, for a produce, from the moment a record was due (its
	// slot under Rate, or when it was handed to the client) to its
	// acknowledgement.
	Latency Quantiles `json:"latency"`
	// Timeline is, for a produce, the worst acknowledgement latency of the
	// records due in each TimelineStep of the run, in order: where in the
	// run the slow acknowledgements were (a stall, a roll, a collection).
	Timeline []time.Duration `json:"timeline_ns,omitempty"`
	// EndToEnd is, for a consume, from the producer's clock stamped in the
	// value to the consumer receiving the record: from the end, for every
	// stamped record read; from the start, only for records stamped after
	// the consume started (see Config.FromEnd).
	EndToEnd Quantiles `json:"end_to_end"`
}

// Quantiles summarise a Histogram.
type Quantiles struct {
	N    uint64        `json:"n"`
	Mean time.Duration `json:"mean_ns"`
	P50  time.Duration `json:"p50_ns"`
	P99  time.Duration `json:"p99_ns"`
	P999 time.Duration `json:"p999_ns"`
	Max  time.Duration `json:"max_ns"`
}

func quantiles(h *Histogram) Quantiles {
	return Quantiles{N: h.Count(), Mean: h.Mean(), P50: h.Quantile(0.50), P99: h.Quantile(0.99), P999: h.Quantile(0.999), Max: h.Max()}
}

func (r *Result) finish(elapsed time.Duration) {
	r.Elapsed = elapsed
	if s := elapsed.Seconds(); s > 0 {
		r.RecordsPerSec = float64(r.Records) / s
		r.MBPerSec = float64(r.Bytes) / 1e6 / s
	}
}

// WriteSummary prints the result for a person, a few lines.
func (r Result) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "%s %s: %d records, %.1f MB in %v (%d partitions", r.Kind, r.Topic, r.Records, float64(r.Bytes)/1e6, r.Elapsed.Round(time.Millisecond), r.Partitions)
	if r.Kind == "produce" {
		fmt.Fprintf(w, ", %d B values, acks=%s, %d producers", r.Size, r.Acks, r.Producers)
		if r.TargetRate > 0 {
			fmt.Fprintf(w, ", rate limit %.0f records/s", r.TargetRate)
		}
	}
	fmt.Fprintln(w, ")")
	fmt.Fprintf(w, "  throughput: %.0f records/s, %.2f MB/s\n", r.RecordsPerSec, r.MBPerSec)
	if r.Latency.N > 0 {
		fmt.Fprintf(w, "  ack latency: %s\n", r.Latency)
	}
	if r.EndToEnd.N > 0 {
		fmt.Fprintf(w, "  end-to-end latency: %s\n", r.EndToEnd)
	}
	if len(r.Timeline) > 0 {
		fmt.Fprintf(w, "  worst ack latency per %v (ms):", TimelineStep)
		for i := 0; i < len(r.Timeline); i += 20 {
			fmt.Fprintf(w, "\n   %s", FormatTimeline(r.Timeline[i:min(i+20, len(r.Timeline))]))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  errors: %d", r.Errors)
	if r.FirstError != "" {
		fmt.Fprintf(w, " (first: %s)", r.FirstError)
	}
	fmt.Fprintln(w)
}

func (q Quantiles) String() string {
	return fmt.Sprintf("p50 %s  p99 %s  p99.9 %s  max %s  mean %s (%d samples)", ms(q.P50), ms(q.P99), ms(q.P999), ms(q.Max), ms(q.Mean), q.N)
}

// FormatTimeline writes steps of a Result.Timeline as whole milliseconds,
// space-separated.
func FormatTimeline(steps []time.Duration) string {
	var b strings.Builder
	for i, d := range steps {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.0f", float64(d)/1e6)
	}
	return b.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
