// Package series numbers the series, (entity, key) pairs, of a batch of rows.
//
// A group commit or a spool delivery holds up to 100,000 rows, and their series
// come in cycles: a device's keys point after point, devices after each other in
// the order their requests were queued. Index remembers which series followed
// each one last time and checks that first, so a row that continues the cycle
// costs one comparison instead of hashing a UUID and a string: those map
// operations were most of the Redis latest-value update of a ClickHouse node at
// 1M points/s (bench/RESULTS.md).
package series

import "github.com/google/uuid"

// Key is one series.
type Key struct {
	Entity uuid.UUID
	Name   string
}

// Index numbers series 0, 1, 2, … in the order it first meets them. The zero
// value is ready to use; Reset empties it for the next batch and keeps its memory.
// An Index is not safe for concurrent use.
type Index struct {
	keys []Key
	next []int32 // next[s]: the series looked up right after s last time, or -1
	ids  map[Key]int32
	last int32 // the series of the previous lookup, when keys is not empty
}

// Of returns the number of the series (entity, name), and whether this call added
// it.
func (x *Index) Of(entity uuid.UUID, name string) (id int, added bool) {
	hasLast := len(x.keys) > 0
	if hasLast {
		if p := x.next[x.last]; p >= 0 {
			if k := &x.keys[p]; k.Entity == entity && k.Name == name {
				x.last = p
				return int(p), false
			}
		}
	}
	if x.ids == nil {
		x.ids = make(map[Key]int32)
	}
	k := Key{entity, name}
	c, ok := x.ids[k]
	if !ok {
		c = int32(len(x.keys))
		x.ids[k] = c
		x.keys = append(x.keys, k)
		x.next = append(x.next, -1)
	}
	if hasLast {
		x.next[x.last] = c
	}
	x.last = c
	return int(c), !ok
}

// Len is the number of series met since the last Reset.
func (x *Index) Len() int { return len(x.keys) }

// Key returns series id.
func (x *Index) Key(id int) Key { return x.keys[id] }

// Reset forgets every series. Key names may alias request memory: they are
// dropped, not kept until the next batch overwrites them.
func (x *Index) Reset() {
	clear(x.keys)
	x.keys, x.next = x.keys[:0], x.next[:0]
	clear(x.ids)
}
