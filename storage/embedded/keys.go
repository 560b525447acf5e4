package embedded

import (
	"encoding/binary"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// Key layout. Every key starts with a one-byte table prefix; uuids are their 16 raw
// bytes, so byte order is ascending id order:
//
//	s | entity | key⁰ | window      history window → chunks (chunk.go)
//	h | entity | key⁰ | ts          history point  → value, before chunks (migrate.go)
//	l | entity | key                latest value   → ts | value
//	a | entity | scope | key        attribute      → ts | value
//	r | kind⁰ | id                  entity record  → record (see record.go)
//	u | kind⁰ | unique              unique index   → id
//	o | kind⁰ | owner | id          owner index    → empty
//	c | entity | name               counter        → int64 (counters.go)
//
// A string marked ⁰ has more key bytes after it, so it is escaped and terminated by
// 0x00: byte 0x00 becomes 0x01 0x01 and 0x01 becomes 0x01 0x02. No escaped string
// contains 0x00, so "temp" never scans into "temp\x00x", and escaped strings sort as
// the originals do. A string at the end of a key is stored raw: nothing follows it
// for it to bleed into. ts and window (a window's start) are 8 bytes big-endian
// with the sign bit flipped, so negative timestamps sort first.
const (
	tableSeries    = 's'
	tableHistory   = 'h'
	tableLatest    = 'l'
	tableAttribute = 'a'
	tableRecord    = 'r'
	tableUnique    = 'u'
	tableOwner     = 'o'
)

// appendString appends s escaped and terminated, as described above.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case 0x00, 0x01:
			dst = append(dst, 0x01, c+1)
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, 0x00)
}

func appendTs(dst []byte, ts int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(ts)^(1<<63))
}

func decodeTs(b []byte) int64 {
	return int64(binary.BigEndian.Uint64(b) ^ (1 << 63))
}

// entityPrefix is the prefix of everything table holds for the entity.
func entityPrefix(dst []byte, table byte, entity uuid.UUID) []byte {
	dst = append(dst, table)
	return append(dst, entity[:]...)
}

// seriesPrefix is the prefix of every history window of one key.
func seriesPrefix(dst []byte, entity uuid.UUID, key string) []byte {
	return appendString(entityPrefix(dst, tableSeries, entity), key)
}

func windowKey(dst []byte, entity uuid.UUID, key string, window int64) []byte {
	return appendTs(seriesPrefix(dst, entity, key), window)
}

func latestKey(dst []byte, entity uuid.UUID, key string) []byte {
	return append(entityPrefix(dst, tableLatest, entity), key...)
}

func attrPrefix(dst []byte, entity uuid.UUID, scope storage.Scope) []byte {
	return append(entityPrefix(dst, tableAttribute, entity), byte(scope))
}

func attrKey(dst []byte, entity uuid.UUID, scope storage.Scope, key string) []byte {
	return append(attrPrefix(dst, entity, scope), key...)
}

func kindPrefix(dst []byte, table byte, kind string) []byte {
	return appendString(append(dst, table), kind)
}

func recordKey(dst []byte, kind string, id uuid.UUID) []byte {
	return append(kindPrefix(dst, tableRecord, kind), id[:]...)
}

func uniqueKey(dst []byte, kind, unique string) []byte {
	return append(kindPrefix(dst, tableUnique, kind), unique...)
}

func ownerPrefix(dst []byte, kind string, owner uuid.UUID) []byte {
	return append(kindPrefix(dst, tableOwner, kind), owner[:]...)
}

func ownerKey(dst []byte, kind string, owner, id uuid.UUID) []byte {
	return append(ownerPrefix(dst, kind, owner), id[:]...)
}

// prefixEnd returns the smallest key greater than every key starting with prefix,
// or nil (no upper bound) when prefix is all 0xff.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
