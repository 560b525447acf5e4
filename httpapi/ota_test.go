package httpapi

import (
	"bytes"
	"context"
	"testing"

	"github.com/sluice-iot/sluice/engine"
)

func TestParseRange(t *testing.T) {
	f := func(spec string, size, from, to int64, ok bool) {
		t.Helper()
		gf, gt, gok := parseRange(spec, size)
		if gok != ok || (ok && (gf != from || gt != to)) {
			t.Fatalf("parseRange(%q, %d) = %d, %d, %v; want %d, %d, %v", spec, size, gf, gt, gok, from, to, ok)
		}
	}
	f("bytes=0-9", 100, 0, 9, true)
	f("bytes=10-", 100, 10, 99, true)
	f("bytes=90-200", 100, 90, 99, true) // clipped to the body
	f("bytes=-10", 100, 90, 99, true)
	f("bytes=-200", 100, 0, 99, true)
	f(" bytes= 5-5 ", 100, 5, 5, true)
	f("bytes=100-", 100, 100, 99, true) // unsatisfiable: from >= size
	f("bytes=-0", 100, 100, 100, true)  // unsatisfiable
	// Not one byte range: ignored.
	f("bytes=0-1,5-6", 100, 0, 0, false)
	f("items=0-1", 100, 0, 0, false)
	f("bytes=5-1", 100, 0, 0, false)
	f("bytes=a-b", 100, 0, 0, false)
	f("bytes=5", 100, 0, 0, false)
	f("bytes=--5", 100, 0, 0, false)
}

// TestDeviceOtaChunkParams: size and chunk are bound as ThingsBoard binds
// Java ints: a size below 1 is the whole package, a value past int32 is 400.
func TestDeviceOtaChunkParams(t *testing.T) {
	n := startTestNode(t)
	ctx := context.Background()
	p, err := n.Eng.Authenticate(ctx, n.tenant())
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("0123456789abcdefghijklmnopqrstuvwxyz0123") // 40 bytes
	info, err := n.Eng.SaveOtaPackageInfo(ctx, p, &engine.SaveOtaPackageInfoRequest{OtaPackageInfo: engine.OtaPackageInfo{
		Type: engine.OtaFirmware, Title: "fw", Version: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Eng.SaveOtaPackageData(ctx, p, info.ID.ID, engine.OtaUpload{
		ChecksumAlgorithm: "SHA256", FileName: "fw.bin", Data: bytes.NewReader(data)}); err != nil {
		t.Fatal(err)
	}
	d, err := n.Eng.GetDevice(ctx, p, n.Demo.DemoDeviceID)
	if err != nil {
		t.Fatal(err)
	}
	d.FirmwareID = &info.ID
	if _, err := n.Eng.SaveDevice(ctx, p, d, ""); err != nil {
		t.Fatal(err)
	}

	base := "/api/v1/" + n.Demo.DemoDeviceToken + "/firmware?title=fw&version=1"
	for _, c := range []struct {
		query  string
		status int
		body   []byte
	}{
		{"", 200, data},
		{"&size=-1", 200, data},
		{"&size=-2147483648&chunk=-5", 200, data}, // chunk unused without a size
		{"&size=0&chunk=3", 200, data},
		{"&size=10&chunk=3", 200, data[30:]},
		{"&size=10&chunk=4", 200, []byte{}},
		{"&size=2147483647&chunk=2147483647", 200, []byte{}},
		{"&size=2147483648", 400, nil},
		{"&size=-2147483649", 400, nil},
		{"&size=10&chunk=2147483648", 400, nil},
		{"&size=10&chunk=-1", 400, nil},
		{"&size=x", 400, nil},
	} {
		status, body := n.do("GET", base+c.query, "", nil)
		if status != c.status || (c.body != nil && !bytes.Equal(body, c.body)) {
			t.Fatalf("%s: %d %q, want %d %q", c.query, status, body, c.status, c.body)
		}
	}
	// A negative chunk is refused once the package is found, as in ThingsBoard.
	if status, _ := n.do("GET", "/api/v1/"+n.Demo.DemoDeviceToken+"/software?title=fw&version=1&size=10&chunk=-1", "", nil); status != 404 {
		t.Fatalf("negative chunk of no package: %d", status)
	}
}
