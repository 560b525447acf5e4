package ingest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// A spool record is one committed batch:
//
//	version byte (1) | row count uvarint | rows
//	row: tenant (16) | entity (16) | ts varint | key uvarint-len + bytes | value
//	value: type byte | bool 1 byte | long varint | double 8 bytes | string/JSON uvarint-len + bytes
//
// Every field is self-delimiting, so a record decodes without outside lengths.
const recordVersion = 1

var errBadRecord = errors.New("corrupt spool record")

func appendRecord(dst []byte, rows []storage.Row) []byte { return appendRecordOf(dst, rows, nil) }

// appendRecordOf appends the record of rows[idx[0]], rows[idx[1]], …; nil idx
// means every row.
func appendRecordOf(dst []byte, rows []storage.Row, idx []int32) []byte {
	count := len(rows)
	if idx != nil {
		count = len(idx)
	}
	dst = append(dst, recordVersion)
	dst = binary.AppendUvarint(dst, uint64(count))
	for j := range count {
		r := &rows[j]
		if idx != nil {
			r = &rows[idx[j]]
		}
		dst = append(dst, r.TenantID[:]...)
		dst = append(dst, r.EntityID[:]...)
		dst = binary.AppendVarint(dst, r.Ts)
		dst = binary.AppendUvarint(dst, uint64(len(r.Key)))
		dst = append(dst, r.Key...)
		dst = append(dst, byte(r.Value.Type))
		switch r.Value.Type {
		case kv.Bool:
			b := byte(0)
			if r.Value.Bool {
				b = 1
			}
			dst = append(dst, b)
		case kv.Long:
			dst = binary.AppendVarint(dst, r.Value.Long)
		case kv.Double:
			dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(r.Value.Double))
		default:
			dst = binary.AppendUvarint(dst, uint64(len(r.Value.Str)))
			dst = append(dst, r.Value.Str...)
		}
	}
	return dst
}

// decodeRecord appends the rows of rec to dst. Strings are copied: rec belongs to
// the spool's iterator and is gone after the next step. Key names are looked up in
// names first (nil: always copied), so a delivery of 100,000 rows of a few series
// does not allocate 100,000 copies of the same few names.
func decodeRecord(dst []storage.Row, rec []byte, names *nameTable) ([]storage.Row, error) {
	d := decoder{b: rec, names: names}
	if d.byte() != recordVersion {
		return dst, fmt.Errorf("%w: unknown version", errBadRecord)
	}
	n := d.uvarint()
	if n > uint64(len(rec)) { // every row takes more than one byte
		return dst, fmt.Errorf("%w: row count %d", errBadRecord, n)
	}
	for range n {
		var r storage.Row
		r.TenantID = d.uuid()
		r.EntityID = d.uuid()
		r.Ts = d.varint()
		r.Key = d.name()
		r.Value.Type = kv.Type(d.byte())
		switch r.Value.Type {
		case kv.Bool:
			r.Value.Bool = d.byte() == 1
		case kv.Long:
			r.Value.Long = d.varint()
		case kv.Double:
			r.Value.Double = math.Float64frombits(d.uint64())
		case kv.String, kv.JSON:
			r.Value.Str = d.str()
		default:
			return dst, fmt.Errorf("%w: value type %d", errBadRecord, r.Value.Type)
		}
		if d.err != nil {
			return dst, d.err
		}
		dst = append(dst, r)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", errBadRecord, len(d.b))
	}
	return dst, d.err
}

// decoder reads fields off b; the first short read sets err and zeroes the rest.
type decoder struct {
	b     []byte
	err   error
	names *nameTable
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated", errBadRecord)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) uint64() uint64 {
	if len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) uuid() (u uuid.UUID) {
	if len(d.b) < 16 {
		d.fail()
		return u
	}
	copy(u[:], d.b)
	d.b = d.b[16:]
	return u
}

// name reads a string like str, returning the copy names already holds if any.
func (d *decoder) name() string {
	if d.names == nil {
		return d.str()
	}
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return ""
	}
	s := d.names.intern(d.b[:n])
	d.b = d.b[n:]
	return s
}

// nameTable interns key names across the records of spool deliveries.
type nameTable struct {
	m map[string]string
}

// maxNames bounds a nameTable: past it the table starts over, so a fleet with
// ever new key names cannot grow it without limit.
const maxNames = 1 << 16

func (t *nameTable) intern(b []byte) string {
	if s, ok := t.m[string(b)]; ok { // no allocation: the compiler looks up without converting
		return s
	}
	if t.m == nil || len(t.m) >= maxNames {
		t.m = make(map[string]string, 64)
	}
	s := string(b)
	t.m[s] = s
	return s
}

func (d *decoder) str() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// recordRows reads a record's row count without decoding its rows.
func recordRows(rec []byte) (int, error) {
	d := decoder{b: rec}
	if d.byte() != recordVersion {
		return 0, fmt.Errorf("%w: unknown version", errBadRecord)
	}
	n := d.uvarint()
	if d.err != nil || n > uint64(len(rec)) {
		return 0, fmt.Errorf("%w: row count", errBadRecord)
	}
	return int(n), nil
}
