package ingest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/internal/series"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// A spool record is one committed batch:
//
//	version byte | row count uvarint | [base version uvarint] | rows
//
// Version 3 adds the base version: the record's j-th row has version base+j
// (internal/version), taken when the spool took the rows, so that ClickHouse
// orders writes and deletes by when they were acknowledged, not by when the
// spool delivered them. A base of 0, and records of versions 1 and 2, which
// have none, take theirs at delivery. Its rows are those of version 2.
//
// Version 2 numbers the record's series (a device's key) so that a row of a
// series seen before in the record names it in one or two bytes, and stores ts
// as the change from the row before. Batches of four keys then take 8-9 bytes a
// row instead of version 1's 54 (BenchmarkSpoolRecord): less to write and
// fdatasync per commit, less to decode per delivery (373 -> 153 µs per 10,000
// rows), and about five times the rows in the same SLUICE_SPOOL_MAX_BYTES
// during an outage.
//
//	row: head byte | series | ts delta varint | value
//	head: value type (bits 0-2) | headNew (bit 3) | headLiteral (bit 4)
//	series, headNew: tenant (16) | entity (16) | key uvarint-len + bytes; it takes
//	        the record's next series number, from 0
//	series, headLiteral: the same fields, numbered nothing (a row whose tenant is
//	        not its series' first row's, which a real batch never has)
//	series, neither: series number uvarint
//	ts delta: ts minus the previous row's ts (0 before the first), wrapping
//	value: bool 1 byte | long varint | double 8 bytes | string/JSON uvarint-len + bytes
//
// Version 1, which earlier versions wrote and a spool may still hold after an
// upgrade, is read as well:
//
//	row: tenant (16) | entity (16) | ts varint | key uvarint-len + bytes | type byte | value
//
// Every field is self-delimiting, so a record decodes without outside lengths.
const (
	recordV1      = 1
	recordV2      = 2
	recordVersion = 3

	headType    = 0x07
	headNew     = 0x08
	headLiteral = 0x10
)

var errBadRecord = errors.New("corrupt spool record")

// recordEncoder numbers the series of the record being encoded; a write keeps
// one in its pooled scratch, so its memory is reused.
type recordEncoder struct {
	series  series.Index
	tenants []uuid.UUID // by series number: the tenant of the series' first row
}

// appendRecord appends the record of rows, without versions, with a fresh
// encoder (tests, tools).
func appendRecord(dst []byte, rows []storage.Row) []byte {
	var e recordEncoder
	return e.append(dst, rows, nil, 0)
}

// append appends the record of rows[idx[0]], rows[idx[1]], … whose versions
// start at ver; nil idx means every row.
func (e *recordEncoder) append(dst []byte, rows []storage.Row, idx []int32, ver uint64) []byte {
	e.series.Reset()
	e.tenants = e.tenants[:0]
	count := len(rows)
	if idx != nil {
		count = len(idx)
	}
	dst = append(dst, recordVersion)
	dst = binary.AppendUvarint(dst, uint64(count))
	dst = binary.AppendUvarint(dst, ver)
	var prev int64
	for j := range count {
		r := &rows[j]
		if idx != nil {
			r = &rows[idx[j]]
		}
		id, added := e.series.Of(r.EntityID, r.Key)
		head := byte(r.Value.Type) & headType
		switch {
		case added:
			e.tenants = append(e.tenants, r.TenantID)
			head |= headNew
		case e.tenants[id] != r.TenantID:
			head |= headLiteral
		}
		dst = append(dst, head)
		if head&(headNew|headLiteral) != 0 {
			dst = append(dst, r.TenantID[:]...)
			dst = append(dst, r.EntityID[:]...)
			dst = binary.AppendUvarint(dst, uint64(len(r.Key)))
			dst = append(dst, r.Key...)
		} else {
			dst = binary.AppendUvarint(dst, uint64(id))
		}
		dst = binary.AppendVarint(dst, r.Ts-prev)
		prev = r.Ts
		dst = appendValue(dst, &r.Value)
	}
	return dst
}

func appendValue(dst []byte, v *kv.Value) []byte {
	switch v.Type {
	case kv.Bool:
		b := byte(0)
		if v.Bool {
			b = 1
		}
		return append(dst, b)
	case kv.Long:
		return binary.AppendVarint(dst, v.Long)
	case kv.Double:
		return binary.BigEndian.AppendUint64(dst, math.Float64bits(v.Double))
	default:
		dst = binary.AppendUvarint(dst, uint64(len(v.Str)))
		return append(dst, v.Str...)
	}
}

// recordReader is what a lane keeps between the records it decodes: the key
// names it interned, so a delivery of 100,000 rows of a few series does not
// allocate 100,000 copies of the same few names, and the series table of
// version 2 records.
type recordReader struct {
	names  nameTable
	series []seriesDef
}

type seriesDef struct {
	tenant, entity uuid.UUID
	key            string
}

// decodeRecord appends the rows of rec to dst. Strings are copied: rec belongs to
// the spool's iterator and is gone after the next step. With a nil rd every key
// name is copied too.
func decodeRecord(dst []storage.Row, rec []byte, rd *recordReader) ([]storage.Row, error) {
	dst, _, err := decodeVersioned(dst, rec, rd)
	return dst, err
}

// decodeVersioned is decodeRecord that also returns the record's base version
// (0: none).
func decodeVersioned(dst []storage.Row, rec []byte, rd *recordReader) (_ []storage.Row, ver uint64, _ error) {
	d := decoder{b: rec}
	if rd != nil {
		d.names = &rd.names
	}
	version := d.byte()
	if version != recordV1 && version != recordV2 && version != recordVersion {
		return dst, 0, fmt.Errorf("%w: unknown version", errBadRecord)
	}
	n := d.uvarint()
	if n > uint64(len(rec)) { // every row takes more than one byte
		return dst, 0, fmt.Errorf("%w: row count %d", errBadRecord, n)
	}
	if version == recordV1 {
		dst, err := d.rowsV1(dst, n)
		return dst, 0, err
	}
	if version == recordVersion {
		ver = d.uvarint()
	}
	dst, err := d.rowsV2(dst, n, rd)
	return dst, ver, err
}

// rowsV2 decodes the n rows of a version 2 or 3 record.
func (d *decoder) rowsV2(dst []storage.Row, n uint64, rd *recordReader) ([]storage.Row, error) {
	var defs []seriesDef
	if rd != nil {
		defs = rd.series[:0]
		defer func() { rd.series = defs[:0] }()
	}
	var ts int64
	for range n {
		var r storage.Row
		head := d.byte()
		r.Value.Type = kv.Type(head & headType)
		switch head &^ headType {
		case headNew, headLiteral:
			s := seriesDef{tenant: d.uuid(), entity: d.uuid(), key: d.name()}
			if head&headNew != 0 {
				defs = append(defs, s)
			}
			r.TenantID, r.EntityID, r.Key = s.tenant, s.entity, s.key
		case 0:
			i := d.uvarint()
			if i >= uint64(len(defs)) {
				if d.err == nil {
					d.err = fmt.Errorf("%w: series %d of %d", errBadRecord, i, len(defs))
				}
				return dst, d.err
			}
			s := &defs[i]
			r.TenantID, r.EntityID, r.Key = s.tenant, s.entity, s.key
		default:
			return dst, fmt.Errorf("%w: row head %#x", errBadRecord, head)
		}
		ts += d.varint()
		r.Ts = ts
		if !d.value(&r.Value) {
			return dst, d.err
		}
		dst = append(dst, r)
	}
	return dst, d.end()
}

// rowsV1 decodes the n rows of a version 1 record.
func (d *decoder) rowsV1(dst []storage.Row, n uint64) ([]storage.Row, error) {
	for range n {
		var r storage.Row
		r.TenantID = d.uuid()
		r.EntityID = d.uuid()
		r.Ts = d.varint()
		r.Key = d.name()
		r.Value.Type = kv.Type(d.byte())
		if !d.value(&r.Value) {
			return dst, d.err
		}
		dst = append(dst, r)
	}
	return dst, d.end()
}

// end is the error of a record whose rows have been read: d.err, or bytes left
// over.
func (d *decoder) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", errBadRecord, len(d.b))
	}
	return d.err
}

// value reads a value of v.Type into v; false when it cannot (d.err says why).
func (d *decoder) value(v *kv.Value) bool {
	switch v.Type {
	case kv.Bool:
		v.Bool = d.byte() == 1
	case kv.Long:
		v.Long = d.varint()
	case kv.Double:
		v.Double = math.Float64frombits(d.uint64())
	case kv.String, kv.JSON:
		v.Str = d.str()
	default:
		if d.err == nil {
			d.err = fmt.Errorf("%w: value type %d", errBadRecord, v.Type)
		}
	}
	return d.err == nil
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
	if v := d.byte(); v != recordV1 && v != recordV2 && v != recordVersion {
		return 0, fmt.Errorf("%w: unknown version", errBadRecord)
	}
	n := d.uvarint()
	if d.err != nil || n > uint64(len(rec)) {
		return 0, fmt.Errorf("%w: row count", errBadRecord)
	}
	return int(n), nil
}
