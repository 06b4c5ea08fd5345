package bench

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram counts durations in log-linear buckets: exact below 128 ns,
// then 64 buckets per power of two, so a quantile is off by less than
// 1/64 (1.6 %) of its value. Record is safe for concurrent use and never
// allocates; its memory is fixed (about 30 KiB).
type Histogram struct {
	counts [histBuckets]atomic.Uint64
	n      atomic.Uint64
	sum    atomic.Int64
	max    atomic.Int64
}

const (
	histSubBits = 6 // 64 buckets per power of two
	histSub     = 1 << histSubBits
	histBuckets = (63-histSubBits)*histSub + 2*histSub
)

func histIndex(v int64) int {
	if v < 2*histSub {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - histSubBits - 1
	return shift*histSub + int(v>>shift)
}

// histLow is the smallest value that falls in bucket i.
func histLow(i int) int64 {
	if i < 2*histSub {
		return int64(i)
	}
	shift := i/histSub - 1
	return int64(i-shift*histSub) << shift
}

// Record adds one duration; negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[histIndex(v)].Add(1)
	h.n.Add(1)
	h.sum.Add(v)
	raise(&h.max, v)
}

// raise sets v to x when x is larger.
func raise(v *atomic.Int64, x int64) {
	for {
		old := v.Load()
		if x <= old || v.CompareAndSwap(old, x) {
			return
		}
	}
}

// Merge adds the counts of o to h.
func (h *Histogram) Merge(o *Histogram) {
	for i := range o.counts {
		if c := o.counts[i].Load(); c != 0 {
			h.counts[i].Add(c)
		}
	}
	h.n.Add(o.n.Load())
	h.sum.Add(o.sum.Load())
	raise(&h.max, o.max.Load())
}

// Count is how many durations were recorded.
func (h *Histogram) Count() uint64 { return h.n.Load() }

// Max is the largest duration recorded (exact).
func (h *Histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// Mean is the average of the durations recorded (exact).
func (h *Histogram) Mean() time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sum.Load() / int64(n))
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1): the middle of the bucket
// holding the ⌈q·n⌉-th smallest duration, never above Max. Zero when
// nothing was recorded.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n) + 0.999999)
	rank = min(max(rank, 1), n)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			lo, hi := histLow(i), histLow(i+1)
			v := lo + (hi-lo-1)/2
			return time.Duration(min(v, h.max.Load()))
		}
	}
	return h.Max()
}
