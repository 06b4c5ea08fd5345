package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlog/raftlog/log"
)

// Raft's own entries (noop, configuration, barrier) and raftlog's (the
// rejoin marker of the vote guard) are stored in the partition log as Kafka
// control batches of one record, so Kafka consumers skip them like the
// transaction markers they already know.
//
// Record key, as Kafka's control record key:
//
//	int16 version (0) | int16 type (controlTypeRaft)
//
// Record value:
//
//	byte   raft.LogType (or entryRejoin)
//	int64  AppendedAt, Unix nanoseconds
//	uvarint len(Extensions) | Extensions
//	rest   Data
//
// The batch's timestamp is AppendedAt in milliseconds, so every replica
// encodes a byte-identical batch for the same entry. Frozen.
const (
	controlKeyVersion = 0
	// controlTypeRaft is far above Kafka's control types (0 abort,
	// 1 commit, 2-6 KRaft), which clients that do not know it ignore.
	controlTypeRaft = 0x5241 // "RA"
)

// entryRejoin marks a raftlog command entry that is a rejoin marker (see
// guard.go). It is stored with raft.LogCommand's value space shifted out of
// the way: raft never sees this type, it is only inside Data.
const (
	entryRejoin        = 0xF0
	entryDeleteRecords = 0xF1 // DeleteRecords: Data is the new log start, int64
)

// isCommandControl reports whether a control type is one of raftlog's own
// commands (replicated through Raft as LogCommand entries).
func isCommandControl(t raft.LogType) bool { return t == entryRejoin || t == entryDeleteRecords }

var errNotControl = errors.New("not a raftlog control batch")

// encodeControl builds the control batch for a raft entry that is not a
// produced batch.
func encodeControl(l *raft.Log) []byte {
	key := binary.BigEndian.AppendUint16(nil, controlKeyVersion)
	key = binary.BigEndian.AppendUint16(key, controlTypeRaft)
	val := appendEntryValue(make([]byte, 0, entryValueMin+binary.MaxVarintLen64+len(l.Extensions)+len(l.Data)), l)
	// An entry with no time (Raft's bootstrap configuration, entry 1 of
	// every group) is stamped -1, Kafka's "no timestamp": stamped 0 (1970)
	// it started its segment's segment.ms clock, and the first produced
	// batch, 56 years later, rolled a segment holding that one entry.
	ts := int64(-1)
	if !l.AppendedAt.IsZero() && l.AppendedAt.UnixNano() != 0 {
		ts = l.AppendedAt.UnixNano() / int64(time.Millisecond)
	}
	return log.BuildBatch(nil, log.BatchOptions{
		LeaderEpoch: int32(l.Term), Attributes: log.AttrControl, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
	}, []log.Record{{Key: key, Value: val, Timestamp: ts}})
}

// decodeControl fills out from a control batch written by encodeControl.
func decodeControl(b log.Batch, out *raft.Log) error {
	if !b.IsControl() || b.RecordCount() != 1 {
		return errNotControl
	}
	recs, _, ok := log.DecodeRecords(b)
	if !ok || len(recs) != 1 {
		return fmt.Errorf("replication: control batch at %d: records do not decode", b.BaseOffset())
	}
	k, v := recs[0].Key, recs[0].Value
	if len(k) != 4 || binary.BigEndian.Uint16(k[2:]) != controlTypeRaft {
		return errNotControl
	}
	if err := decodeEntryValue(v, out); err != nil {
		return fmt.Errorf("replication: control batch at %d: %w", b.BaseOffset(), err)
	}
	return nil
}

// entryValueMin is the size of an entry value without extensions or data.
const entryValueMin = 1 + 8 + 1

// appendEntryValue appends what both stored forms of a Raft entry that
// is not a produced batch hold of it (a control batch's record value,
// the tail of an entries-file record): its type, AppendedAt in Unix
// nanoseconds (0 when zero), its extensions after their uvarint length,
// and its data to the end.
func appendEntryValue(b []byte, l *raft.Log) []byte {
	b = append(b, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.BigEndian.AppendUint64(b, uint64(at))
	b = binary.AppendUvarint(b, uint64(len(l.Extensions)))
	b = append(b, l.Extensions...)
	return append(b, l.Data...)
}

// decodeEntryValue sets out's type, AppendedAt, extensions and data from
// v (appendEntryValue's bytes); empty extensions and data are nil.
func decodeEntryValue(v []byte, out *raft.Log) error {
	if len(v) < entryValueMin {
		return fmt.Errorf("value of %d bytes", len(v))
	}
	out.Type = raft.LogType(v[0])
	out.AppendedAt = time.Time{}
	if at := int64(binary.BigEndian.Uint64(v[1:9])); at != 0 {
		out.AppendedAt = time.Unix(0, at)
	}
	n, w := binary.Uvarint(v[9:])
	if w <= 0 || uint64(len(v)-9-w) < n {
		return errors.New("bad extensions length")
	}
	out.Extensions, out.Data = nil, nil
	if n > 0 {
		out.Extensions = v[9+w : 9+w+int(n)]
	}
	if rest := v[9+w+int(n):]; len(rest) > 0 {
		out.Data = rest
	}
	return nil
}
