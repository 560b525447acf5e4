package engine

import (
	"crypto/md5"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"hash/crc32"
	"strings"

	"github.com/twmb/murmur3"
)

// Checksum algorithms of OTA packages (ThingsBoard's ChecksumAlgorithm).
const (
	ChecksumMD5        = "MD5"
	ChecksumSHA256     = "SHA256"
	ChecksumSHA384     = "SHA384"
	ChecksumSHA512     = "SHA512"
	ChecksumCRC32      = "CRC32"
	ChecksumMurmur332  = "MURMUR3_32"
	ChecksumMurmur3128 = "MURMUR3_128"
)

// checksum is a running checksum of one algorithm whose text is what Guava's
// HashCode.toString() prints for the same bytes (compat §5): lower-case hex of the
// hash bytes. Guava holds CRC32 and MURMUR3_32 as an int and gives its bytes
// little-endian, and MURMUR3_128 as h1 then h2, each little-endian; Go's Sum
// methods give big-endian bytes, so those three are formatted here.
type checksum struct {
	h hash.Hash
}

// newChecksum returns the running checksum of a ThingsBoard algorithm name (any
// case, as ChecksumAlgorithm.valueOf(s.toUpperCase())), and the canonical name.
func newChecksum(algorithm string) (checksum, string, bool) {
	name := strings.ToUpper(algorithm)
	var h hash.Hash
	switch name {
	case ChecksumMD5:
		h = md5.New()
	case ChecksumSHA256:
		h = sha256.New()
	case ChecksumSHA384:
		h = sha512.New384()
	case ChecksumSHA512:
		h = sha512.New()
	case ChecksumCRC32:
		h = crc32.NewIEEE()
	case ChecksumMurmur332:
		h = murmur3.New32() // seed 0, as Hashing.murmur3_32()
	case ChecksumMurmur3128:
		h = murmur3.New128() // seed 0, as Hashing.murmur3_128()
	default:
		return checksum{}, "", false
	}
	return checksum{h: h}, name, true
}

func (c checksum) Write(p []byte) (int, error) { return c.h.Write(p) }

// String is the checksum text of everything written so far.
func (c checksum) String() string {
	var b []byte
	switch h := c.h.(type) {
	case murmur3.Hash128:
		h1, h2 := h.Sum128()
		b = binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, h1), h2)
	case hash.Hash32:
		b = binary.LittleEndian.AppendUint32(nil, h.Sum32())
	default:
		b = c.h.Sum(nil)
	}
	return hex.EncodeToString(b)
}

// Checksum returns the checksum text of data with a ThingsBoard algorithm name;
// ok is false for an unknown algorithm.
func Checksum(algorithm string, data []byte) (sum string, ok bool) {
	c, _, ok := newChecksum(algorithm)
	if !ok {
		return "", false
	}
	c.Write(data)
	return c.String(), true
}
