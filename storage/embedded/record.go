package embedded

import (
	"encoding/binary"
	"fmt"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// A record is stored as owner(16) | uvarint count of unique values | each unique
// value as uvarint length + bytes | Data. Kind and ID live in the key.

func appendRecord(dst []byte, r storage.Record) []byte {
	dst = append(dst, r.Owner[:]...)
	dst = binary.AppendUvarint(dst, uint64(len(r.Unique)))
	for _, u := range r.Unique {
		dst = binary.AppendUvarint(dst, uint64(len(u)))
		dst = append(dst, u...)
	}
	return append(dst, r.Data...)
}

// decodeRecord decodes what appendRecord wrote; the result holds no reference to b.
func decodeRecord(kind string, id uuid.UUID, b []byte) (storage.Record, error) {
	r := storage.Record{Kind: kind, ID: id}
	if len(b) < len(r.Owner) {
		return r, fmt.Errorf("%w: record of %d bytes", errCorrupt, len(b))
	}
	copy(r.Owner[:], b)
	b = b[len(r.Owner):]
	n, size := binary.Uvarint(b)
	if size <= 0 || n > uint64(len(b)) {
		return r, fmt.Errorf("%w: bad unique count", errCorrupt)
	}
	b = b[size:]
	if n > 0 {
		r.Unique = make([]string, 0, n)
	}
	for range n {
		l, size := binary.Uvarint(b)
		if size <= 0 || l > uint64(len(b)-size) {
			return r, fmt.Errorf("%w: bad unique value length", errCorrupt)
		}
		r.Unique = append(r.Unique, string(b[size:size+int(l)]))
		b = b[size+int(l):]
	}
	if len(b) > 0 {
		r.Data = append([]byte(nil), b...)
	}
	return r, nil
}
