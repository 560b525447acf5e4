package engine

import "testing"

// TestChecksum checks every algorithm against known values of Guava's
// HashCode.toString(). Sources: CRC32 and MURMUR3_128 from Guava's
// ChecksumHashFunctionTest and Murmur3Hash128Test (ascii input, seed 0);
// MURMUR3_32 from Murmur3Hash32Test, whose hashInt(n) hashes the int's four bytes
// little-endian and whose hashString("hello") hashes its UTF-16LE chars; the
// digests are the RFC 1321 / FIPS 180 test values. Guava prints an int hash's
// bytes little-endian, so CRC32("123456789") = 0xCBF43926 is "2639f4cb".
func TestChecksum(t *testing.T) {
	f := func(algorithm, data, want string) {
		t.Helper()
		got, ok := Checksum(algorithm, []byte(data))
		if !ok || got != want {
			t.Fatalf("%s(%q) = %q, %v; want %q", algorithm, data, got, ok, want)
		}
	}
	f("MD5", "", "d41d8cd98f00b204e9800998ecf8427e")
	f("md5", "abc", "900150983cd24fb0d6963f7d28e17f72")
	f("SHA256", "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
	f("SHA384", "abc", "cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed8086072ba1e7cc2358baeca134c825a7")
	f("SHA512", "abc", "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f")

	f("CRC32", "123456789", "2639f4cb")                                   // 0xCBF43926
	f("CRC32", "hello", "86a61036")                                       // 0x3610A686
	f("CRC32", "The quick brown fox jumps over the lazy dog", "39a34f41") // 0x414FA339

	f("MURMUR3_32", "", "00000000")
	f("MURMUR3_32", "\x00\x00\x00\x00", "def96223")          // hashInt(0) = 593689054 = 0x2362f9de
	f("MURMUR3_32", "\x2a\x00\x00\x00", "e3915bbc")          // hashInt(42) = -1134849565 = 0xbc5b91e3
	f("MURMUR3_32", "h\x00e\x00l\x00l\x00o\x00", "8919c3d7") // hashString("hello") = -675079799 = 0xd7c31989

	f("MURMUR3_128", "", "00000000000000000000000000000000")
	f("MURMUR3_128", "hell", "67f8103e694299624753ebba820bdb92") // h1 0x629942693e10f867, h2 0x92db0b82baeb5347
	f("MURMUR3_128", "The quick brown fox jumps over the lazy dog",
		"6c1b07bc7bbc4be347939ac4a93c437a") // h1 0xe34bbc7bbc071b6c, h2 0x7a433ca9c49a9347

	if _, ok := Checksum("SHA1", nil); ok {
		t.Fatal("SHA1 accepted")
	}
}
