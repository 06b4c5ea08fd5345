package cluster

import (
	"reflect"
	"testing"

	"github.com/raftlog/raftlog/log"
)

// FuzzControllerSnapshot: a metadata log that resumes after a gap with
// two commands of any bytes (a plain snapshot, or the parts of a packed
// one) is applied or refused with an error, never a panic; a state it
// installs snapshots again, plain and packed, to the same state.
func FuzzControllerSnapshot(f *testing.F) {
	st, after := sampleMeta(f).capture()
	plain, _ := snapshotBatches(st, after, 1<<20)
	packed, _ := snapshotBatches(st, after, 1100)
	value := func(b []byte) []byte {
		var v []byte
		log.Batches(b, func(bt log.Batch) bool {
			if recs, _, ok := log.DecodeRecords(bt); ok && len(recs) == 1 {
				v = recs[0].Value
			}
			return false
		})
		return v
	}
	f.Add(value(plain[0]), []byte(`{"op":"alloc_producer_id"}`))
	if len(packed) >= 2 {
		f.Add(value(packed[0]), value(packed[1]))
	}
	f.Add([]byte(`{"op":"snapshot","parts":2,"part":0,"data":"KLUv/QBYAQAAe30="}`), []byte(`{"op":"snapshot","parts":2,"part":1,"data":"AA=="}`))
	f.Add([]byte(`{"op":"snapshot","state":{"topics":{"t":{"assignment":[[1]]}}}}`), []byte(`{}`))
	// States whose keys are not what their entries name.
	f.Add([]byte(`{"op":"snapshot","state":{"offsets":{"g":{"a":{"t":"","p":0,"o":5},"b":{"t":"","p":0,"o":7}}}}}`), []byte(`{}`))
	f.Add([]byte(`{"op":"snapshot","state":{"topics":{"t":{"Name":"u"}}}}`), []byte(`{}`))
	f.Add([]byte(`{"op":"snapshot","state":{"brokers":{"1":{"id":2}}}}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, first, second []byte) {
		m := newMeta()
		err := m.apply(recordAt(first, 100))
		if err == nil {
			err = m.apply(recordAt(second, 101))
		}
		if err != nil {
			return
		}
		want := fullViewOf(m)
		st, after := m.capture()
		for _, maxBatch := range []int{1 << 20, 1100} {
			batches, err := snapshotBatches(st, after, maxBatch)
			if err != nil {
				t.Fatalf("snapshot of an installed state (batch limit %d): %v", maxBatch, err)
			}
			again := newMeta()
			for i, b := range batches {
				if err := again.apply(rebase(b, int64(200+i))); err != nil {
					t.Fatalf("its snapshot (batch limit %d) does not apply: %v", maxBatch, err)
				}
			}
			if got := fullViewOf(again); !reflect.DeepEqual(got, want) {
				t.Fatalf("restored from its snapshot (batch limit %d):\n%+v\nwant\n%+v", maxBatch, got, want)
			}
		}
	})
}

// recordAt is a batch at offset of one record whose value is v.
func recordAt(v []byte, offset int64) []byte {
	return log.BuildBatch(nil, log.BatchOptions{BaseOffset: offset, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, []log.Record{{Value: v, Timestamp: 1}})
}

// rebase is the one-record batch b at offset.
func rebase(b []byte, offset int64) []byte {
	var out []byte
	log.Batches(b, func(bt log.Batch) bool {
		if recs, _, ok := log.DecodeRecords(bt); ok && len(recs) == 1 {
			out = recordAt(recs[0].Value, offset)
		}
		return false
	})
	return out
}
