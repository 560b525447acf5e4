package apitest

import (
	"bytes"
	"compress/gzip"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/textproto"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-iot/sluice/config"
)

// otaInfo is the part of an OtaPackageInfo the tests look at.
type otaInfo struct {
	ID                entityID  `json:"id"`
	DeviceProfileID   *entityID `json:"deviceProfileId"`
	Type              string    `json:"type"`
	Title             string    `json:"title"`
	Version           string    `json:"version"`
	HasData           bool      `json:"hasData"`
	FileName          *string   `json:"fileName"`
	ContentType       *string   `json:"contentType"`
	ChecksumAlgorithm *string   `json:"checksumAlgorithm"`
	Checksum          *string   `json:"checksum"`
	DataSize          *int64    `json:"dataSize"`
}

// defaultProfileID returns the id of the tenant's default device profile.
func (n *testNode) defaultProfileID(auth string) string {
	n.t.Helper()
	var dp struct{ ID entityID }
	n.must(200, "GET", "/api/deviceProfileInfo/default", "", auth).JSON(n.t, &dp)
	return dp.ID.ID
}

// createOta creates a package info of a profile and returns its id.
func (n *testNode) createOta(auth, typ, title, version, profileID, extra string) string {
	n.t.Helper()
	var info otaInfo
	body := fmt.Sprintf(`{"type":%q,"title":%q,"version":%q,"deviceProfileId":{"entityType":"DEVICE_PROFILE","id":%q}%s}`,
		typ, title, version, profileID, extra)
	n.must(200, "POST", "/api/otaPackage", body, auth).JSON(n.t, &info)
	if info.ID.EntityType != "OTA_PACKAGE" || info.HasData != strings.Contains(extra, `"url"`) || info.Title != title || info.Type != typ {
		n.t.Fatalf("created %+v", info)
	}
	return info.ID.ID
}

// uploadOta posts data as the multipart part "file" of a package.
func (n *testNode) uploadOta(auth, id, algorithm, checksum, fileName string, data []byte) response {
	n.t.Helper()
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="file"; filename="`+fileName+`"`)
	h.Set("Content-Type", "application/x-firmware")
	part, err := w.CreatePart(h)
	if err != nil {
		n.t.Fatal(err)
	}
	part.Write(data)
	w.Close()
	path := "/api/otaPackage/" + id + "?checksumAlgorithm=" + algorithm
	if checksum != "" {
		path += "&checksum=" + checksum
	}
	return n.do("POST", path, body.String(), auth, "Content-Type: "+w.FormDataContentType())
}

// newOta creates a package with data and returns its id.
func (n *testNode) newOta(auth, typ, title, version, profileID string, data []byte) string {
	n.t.Helper()
	id := n.createOta(auth, typ, title, version, profileID, "")
	if r := n.uploadOta(auth, id, "SHA256", "", title+".bin", data); r.Status != 200 {
		n.t.Fatalf("upload: %d %s", r.Status, r.Body)
	}
	return id
}

// assignOta sets (pkg != "") or clears field (firmwareId, softwareId) on the
// entity read from getPath and saved to savePath (a device or a device profile).
func (n *testNode) assignOta(auth, getPath, savePath, field, pkg string) response {
	n.t.Helper()
	var v map[string]any
	n.must(200, "GET", getPath, "", auth).JSON(n.t, &v)
	v[field] = nil
	if pkg != "" {
		v[field] = map[string]string{"entityType": "OTA_PACKAGE", "id": pkg}
	}
	b, _ := json.Marshal(v)
	return n.do("POST", savePath, string(b), auth)
}

func (n *testNode) assignDeviceOta(auth, deviceID, field, pkg string) {
	n.t.Helper()
	if r := n.assignOta(auth, "/api/device/"+deviceID, "/api/device", field, pkg); r.Status != 200 {
		n.t.Fatalf("assign %s %s to device: %d %s", field, pkg, r.Status, r.Body)
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestOtaChecksums: every algorithm over HTTP, computed when absent and checked
// when given; Guava's little-endian text for CRC32 and MURMUR3_32.
func TestOtaChecksums(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	profile := n.defaultProfileID(auth)
	hexOf := func(b []byte) string { return hex.EncodeToString(b) }
	md := md5.Sum([]byte("123456789"))
	s384 := sha512.Sum384([]byte("123456789"))
	s512 := sha512.Sum512([]byte("123456789"))
	for _, c := range []struct{ algorithm, data, want string }{
		{"MD5", "123456789", hexOf(md[:])},
		{"SHA256", "123456789", sha256Hex([]byte("123456789"))},
		{"SHA384", "123456789", hexOf(s384[:])},
		{"SHA512", "123456789", hexOf(s512[:])},
		{"CRC32", "123456789", "2639f4cb"},
		{"crc32", "hello", "86a61036"},
		{"MURMUR3_32", "\x2a\x00\x00\x00", "e3915bbc"},
		{"MURMUR3_128", "hell", "67f8103e694299624753ebba820bdb92"},
	} {
		for i, given := range []string{"", c.want} {
			id := n.createOta(auth, "FIRMWARE", "sum-"+c.algorithm+"-"+c.want, strconv.Itoa(i), profile, "")
			r := n.uploadOta(auth, id, c.algorithm, given, "f.bin", []byte(c.data))
			var info otaInfo
			if r.Status != 200 {
				t.Fatalf("%s checksum %q: %d %s", c.algorithm, given, r.Status, r.Body)
			}
			r.JSON(t, &info)
			if !info.HasData || *info.Checksum != c.want || *info.ChecksumAlgorithm != strings.ToUpper(c.algorithm) || *info.DataSize != int64(len(c.data)) {
				t.Fatalf("%s(%q): %+v, want checksum %s", c.algorithm, c.data, info, c.want)
			}
		}
	}

	// A wrong checksum keeps nothing; then the right one is taken, and only once.
	id := n.createOta(auth, "FIRMWARE", "checked", "1", profile, "")
	if msg := errorBody(t, n.uploadOta(auth, id, "CRC32", "cbf43926", "f.bin", []byte("123456789")), 400); msg != "Wrong otaPackage file!" {
		t.Fatalf("wrong checksum: %q", msg)
	}
	var info otaInfo
	n.must(200, "GET", "/api/otaPackage/info/"+id, "", auth).JSON(t, &info)
	if info.HasData || info.Checksum != nil {
		t.Fatalf("after a wrong checksum: %+v", info)
	}
	if r := n.uploadOta(auth, id, "CRC32", "2639f4cb", "f.bin", []byte("123456789")); r.Status != 200 {
		t.Fatalf("right checksum: %d %s", r.Status, r.Body)
	}
	if msg := errorBody(t, n.uploadOta(auth, id, "CRC32", "", "g.bin", []byte("other")), 400); msg != "Updating otaPackage data is prohibited!" {
		t.Fatalf("second upload: %q", msg)
	}
	errorBody(t, n.uploadOta(auth, n.createOta(auth, "FIRMWARE", "x", "1", profile, ""), "SHA1", "", "f", []byte("x")), 400)
	errorBody(t, n.uploadOta(auth, n.createOta(auth, "FIRMWARE", "x", "2", profile, ""), "MD5", "", "f", nil), 400)
}

// TestOtaPackages: create, conflicts, list, download whole and by Range, roles,
// and deletion refused while assigned.
func TestOtaPackages(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	customer := n.login("customer@thingsboard.org", "customer")
	profile := n.defaultProfileID(auth)
	data := make([]byte, 3<<20) // several storage chunks
	rand.Read(data)

	id := n.createOta(auth, "FIRMWARE", "fw", "1.0", profile, `,"tag":"fw 1.0"`)
	for _, body := range []string{
		`{"type":"FIRMWARE","title":"fw","version":"1.0"}`, // title+version taken
		`{"type":"SOFTWARE","title":"fw","version":"1.0"}`, // also across types
		`{"type":"FIRMWARE","title":"","version":"1"}`,
		`{"type":"FIRMWARE","title":"t","version":""}`,
		`{"title":"t","version":"1"}`,
		`{"type":"FIRMWARE","title":"t","version":"1","usesUrl":true}`,
		`{"type":"FIRMWARE","title":"t","version":"1","deviceProfileId":{"entityType":"DEVICE_PROFILE","id":"3e1f2a9c-0000-4000-8000-000000000000"}}`,
	} {
		errorBody(t, n.do("POST", "/api/otaPackage", body, auth), 400)
	}
	if msg := errorBody(t, n.do("POST", "/api/otaPackage", `{"type":"FIRMWARE","title":"fw","version":"1.0"}`, auth), 400); msg != "OtaPackage with such title and version already exists!" {
		t.Fatalf("duplicate: %q", msg)
	}
	errorBody(t, n.do("POST", "/api/otaPackage", `{"type":"FIRMWARE","title":"c","version":"1"}`, customer), 403)

	// No data yet: download 404; then upload.
	errorBody(t, n.do("GET", "/api/otaPackage/"+id+"/download", "", auth), 404)
	var info otaInfo
	n.must(200, "GET", "/api/otaPackage/info/"+id, "", customer).JSON(t, &info)
	if info.HasData {
		t.Fatalf("before upload: %+v", info)
	}
	r := n.uploadOta(auth, id, "SHA256", sha256Hex(data), "fw-1.0.bin", data)
	if r.Status != 200 {
		t.Fatalf("upload: %d %s", r.Status, r.Body)
	}
	r.JSON(t, &info)
	if !info.HasData || *info.FileName != "fw-1.0.bin" || *info.ContentType != "application/x-firmware" || *info.DataSize != int64(len(data)) {
		t.Fatalf("uploaded: %+v", info)
	}

	// Download: whole, then resumed with Range.
	dl := "/api/otaPackage/" + id + "/download"
	r = n.must(200, "GET", dl, "", auth)
	if !bytes.Equal(r.Body, data) || r.Header.Get("Content-Disposition") != "attachment;filename=fw-1.0.bin" ||
		r.Header.Get("X-Filename") != "fw-1.0.bin" || r.Header.Get("Content-Type") != "application/x-firmware" ||
		r.Header.Get("Accept-Ranges") != "bytes" || r.Header.Get("Content-Length") != strconv.Itoa(len(data)) {
		t.Fatalf("download: %d bytes, headers %v", len(r.Body), r.Header)
	}
	ranged := func(spec string, from, to int) {
		t.Helper()
		r := n.must(206, "GET", dl, "", auth, "Range: "+spec)
		want := fmt.Sprintf("bytes %d-%d/%d", from, to, len(data))
		if !bytes.Equal(r.Body, data[from:to+1]) || r.Header.Get("Content-Range") != want {
			t.Fatalf("Range %s: %d bytes, Content-Range %q, want %s", spec, len(r.Body), r.Header.Get("Content-Range"), want)
		}
	}
	ranged("bytes=0-9", 0, 9)
	ranged("bytes=1048570-1048580", 1048570, 1048580) // across a storage chunk
	ranged("bytes=2000000-", 2000000, len(data)-1)    // resume
	ranged("bytes=-100", len(data)-100, len(data)-1)
	r = n.do("GET", dl, "", auth, "Range: bytes="+strconv.Itoa(len(data))+"-")
	errorBody(t, r, 416)
	if r.Header.Get("Content-Range") != "bytes */"+strconv.Itoa(len(data)) {
		t.Fatalf("416 Content-Range %q", r.Header.Get("Content-Range"))
	}
	if r := n.must(200, "GET", dl, "", auth, "Range: bytes=0-1,5-6"); len(r.Body) != len(data) {
		t.Fatal("a multi-range request is not the whole package")
	}
	errorBody(t, n.do("GET", dl, "", customer), 403)

	// Lists.
	n.createOta(auth, "SOFTWARE", "sw", "1.0", profile, "")
	var page struct {
		Data          []otaInfo
		TotalElements int
	}
	n.must(200, "GET", "/api/otaPackages?pageSize=10&page=0&sortProperty=title&sortOrder=ASC", "", customer).JSON(t, &page)
	if page.TotalElements != 2 || page.Data[0].Title != "fw" || page.Data[1].Title != "sw" {
		t.Fatalf("list: %+v", page)
	}
	n.must(200, "GET", "/api/otaPackages/"+profile+"/FIRMWARE?pageSize=10&page=0", "", auth).JSON(t, &page)
	if page.TotalElements != 1 || page.Data[0].ID.ID != id {
		t.Fatalf("assignable firmware: %+v", page)
	}
	n.must(200, "GET", "/api/otaPackages/"+profile+"/SOFTWARE?pageSize=10&page=0", "", auth).JSON(t, &page)
	if page.TotalElements != 0 {
		t.Fatalf("software without data is listed: %+v", page)
	}
	errorBody(t, n.do("GET", "/api/otaPackages/"+profile+"/HARDWARE?pageSize=10&page=0", "", auth), 400)

	// Deletion: refused while a device or the profile uses it.
	devID, _ := n.createDevice(auth, "ota-del")
	n.assignDeviceOta(auth, devID, "firmwareId", id)
	if msg := errorBody(t, n.do("DELETE", "/api/otaPackage/"+id, "", auth), 400); msg != "The otaPackage referenced by the devices cannot be deleted!" {
		t.Fatalf("delete assigned: %q", msg)
	}
	n.assignDeviceOta(auth, devID, "firmwareId", "")
	if r := n.assignOta(auth, "/api/deviceProfile/"+profile, "/api/deviceProfile", "firmwareId", id); r.Status != 200 {
		t.Fatalf("assign to profile: %d %s", r.Status, r.Body)
	}
	if msg := errorBody(t, n.do("DELETE", "/api/otaPackage/"+id, "", auth), 400); msg != "The otaPackage referenced by the device profile cannot be deleted!" {
		t.Fatalf("delete assigned to profile: %q", msg)
	}
	n.assignOta(auth, "/api/deviceProfile/"+profile, "/api/deviceProfile", "firmwareId", "")
	errorBody(t, n.do("DELETE", "/api/otaPackage/"+id, "", customer), 403)
	n.must(200, "DELETE", "/api/otaPackage/"+id, "", auth)
	errorBody(t, n.do("GET", "/api/otaPackage/info/"+id, "", auth), 404)
	errorBody(t, n.do("GET", dl, "", auth), 404)
}

// fwKeys are the shared attributes a firmware assignment of a data package sets.
const fwKeys = "fw_title,fw_version,fw_tag,fw_size,fw_checksum_algorithm,fw_checksum"

// TestOtaDeviceAssignment: assigning firmware on a device wakes its long poll with
// the fw_* attributes and sets fw_state; the device downloads whole, by chunk and
// by Range; un-assigning deletes the attributes; a profile assignment reaches the
// devices without their own package; software is the same with sw_*.
func TestOtaDeviceAssignment(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	profile := n.defaultProfileID(auth)
	data := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	fw := n.newOta(auth, "FIRMWARE", "fw", "2.0", profile, data)
	id, token := n.createDevice(auth, "ota-device")
	firmware := "/api/v1/" + token + "/firmware"

	// Nothing assigned: 404.
	errorBody(t, n.do("GET", firmware+"?title=fw&version=2.0", ""), 404)

	res := n.openPoll(token, "?timeout=30000")
	n.assignDeviceOta(auth, id, "firmwareId", fw)
	delivered(t, res, fmt.Sprintf(`{"fw_title":"fw","fw_version":"2.0","fw_size":%d,"fw_checksum_algorithm":"SHA256","fw_checksum":"%s"}`,
		len(data), sha256Hex(data)))
	if got := n.latestStrict(auth, id, "fw_state,target_fw_title,target_fw_version"); !strings.Contains(got, `"fw_state":[{"ts":`) ||
		!strings.Contains(got, `"value":"INITIATED"`) || !strings.Contains(got, `"target_fw_title":[{"ts":`) || !strings.Contains(got, `"value":"2.0"`) {
		t.Fatalf("OTA telemetry: %s", got)
	}
	hist := n.must(200, "GET", "/api/plugins/telemetry/DEVICE/"+id+"/values/timeseries?keys=fw_state&startTs=0&endTs=9999999999999", "", auth)
	if !strings.Contains(string(hist.Body), "QUEUED") || !strings.Contains(string(hist.Body), "INITIATED") {
		t.Fatalf("fw_state history: %s", hist.Body)
	}
	if r := n.must(200, "GET", "/api/v1/"+token+"/attributes?sharedKeys="+fwKeys, ""); !strings.Contains(string(r.Body), `"fw_version":"2.0"`) {
		t.Fatalf("device attributes: %s", r.Body)
	}

	// Download: whole, chunks, past the end, Range.
	get := func(query string, status int, want []byte, headers ...string) response {
		t.Helper()
		r := n.must(status, "GET", firmware+query, "", headers...)
		if !bytes.Equal(r.Body, want) {
			t.Fatalf("%s: %q, want %q", query, r.Body, want)
		}
		return r
	}
	r := get("?title=fw&version=2.0", 200, data)
	if r.Header.Get("Content-Disposition") != "attachment;filename=fw.bin" || r.Header.Get("X-Filename") != "fw.bin" ||
		r.Header.Get("Content-Type") != "application/x-firmware" || r.Header.Get("Content-Length") != strconv.Itoa(len(data)) {
		t.Fatalf("headers %v", r.Header)
	}
	get("?title=fw&version=2.0&size=0", 200, data)
	get("?title=fw&version=2.0&size=10&chunk=0", 200, data[:10])
	get("?title=fw&version=2.0&size=10&chunk=3", 200, data[30:])
	get("?title=fw&version=2.0&size=10&chunk=4", 200, []byte{})
	// size and chunk are Java ints, as ThingsBoard binds them: the largest
	// product is past the end, a value past int32 is 400, and a size below 1
	// is the whole package (chunk unused).
	get("?title=fw&version=2.0&size=2147483647&chunk=2147483647", 200, []byte{})
	errorBody(t, n.do("GET", firmware+"?title=fw&version=2.0&size=2147483648", ""), 400)
	errorBody(t, n.do("GET", firmware+"?title=fw&version=2.0&size=10&chunk=-1", ""), 400)
	get("?title=fw&version=2.0&size=-1&chunk=-1", 200, data)
	get("?title=fw&version=2.0&chunk=2", 200, data) // no size: whole
	r = get("?title=fw&version=2.0", 206, data[20:], "Range: bytes=20-")
	if r.Header.Get("Content-Range") != fmt.Sprintf("bytes 20-%d/%d", len(data)-1, len(data)) {
		t.Fatalf("Content-Range %q", r.Header.Get("Content-Range"))
	}
	errorBody(t, n.do("GET", firmware+"?title=fw&version=2.0", "", "Range: bytes=99-"), 416)
	errorBody(t, n.do("GET", firmware+"?title=fw&version=1.0", ""), 400)
	errorBody(t, n.do("GET", firmware+"?title=other&version=2.0", ""), 400)
	errorBody(t, n.do("GET", firmware+"?version=2.0", ""), 400)
	errorBody(t, n.do("GET", firmware+"?title=fw", ""), 400)
	errorBody(t, n.do("GET", firmware+"?title=fw&version=2.0&size=x", ""), 400)
	errorBody(t, n.do("GET", "/api/v1/"+token+"/software?title=fw&version=2.0", ""), 404)
	errorBody(t, n.do("GET", "/api/v1/NO_SUCH_TOKEN/firmware?title=fw&version=2.0", ""), 401)

	// A firmware package is not software; un-assigning deletes every fw_* key.
	if r := n.assignOta(auth, "/api/device/"+id, "/api/device", "softwareId", fw); r.Status != 400 {
		t.Fatalf("firmware as software: %d %s", r.Status, r.Body)
	}
	res = n.openPoll(token, "?timeout=30000")
	n.assignDeviceOta(auth, id, "firmwareId", "")
	delivered(t, res, `{"deleted":["fw_title","fw_version","fw_size","fw_checksum","fw_checksum_algorithm"]}`) // OtaPackageUtil's order
	errorBody(t, n.do("GET", firmware+"?title=fw&version=2.0", ""), 404)

	// Profile assignment: reaches a device without its own package, not one with.
	fw3 := n.newOta(auth, "FIRMWARE", "fw", "3.0", profile, []byte("three"))
	own, ownToken := n.createDevice(auth, "ota-own")
	n.assignDeviceOta(auth, own, "firmwareId", fw)
	res = n.openPoll(token, "?timeout=30000")
	if r := n.assignOta(auth, "/api/deviceProfile/"+profile, "/api/deviceProfile", "firmwareId", fw3); r.Status != 200 {
		t.Fatalf("assign to profile: %d %s", r.Status, r.Body)
	}
	delivered(t, res, fmt.Sprintf(`{"fw_title":"fw","fw_version":"3.0","fw_size":5,"fw_checksum_algorithm":"SHA256","fw_checksum":"%s"}`, sha256Hex([]byte("three"))))
	get("?title=fw&version=3.0", 200, []byte("three"))
	if r := n.must(200, "GET", "/api/v1/"+ownToken+"/firmware?title=fw&version=2.0", ""); !bytes.Equal(r.Body, data) {
		t.Fatalf("device with its own package: %q", r.Body)
	}
	// A device created in the profile gets the profile's package at once.
	newID, newToken := n.createDevice(auth, "ota-new")
	if got := n.latestStrict(auth, newID, "fw_state"); !strings.Contains(got, "INITIATED") {
		t.Fatalf("new device fw_state: %s", got)
	}
	n.must(200, "GET", "/api/v1/"+newToken+"/firmware?title=fw&version=3.0", "")

	// Software, with a tag: sw_* keys.
	sw := n.createOta(auth, "SOFTWARE", "app", "0.1", profile, `,"tag":"beta"`)
	if r := n.uploadOta(auth, sw, "CRC32", "", "app.bin", []byte("123456789")); r.Status != 200 {
		t.Fatalf("upload software: %d %s", r.Status, r.Body)
	}
	res = n.openPoll(token, "?timeout=30000")
	n.assignDeviceOta(auth, id, "softwareId", sw)
	delivered(t, res, `{"sw_title":"app","sw_version":"0.1","sw_tag":"beta","sw_size":9,"sw_checksum_algorithm":"CRC32","sw_checksum":"2639f4cb"}`)
	if r := n.must(200, "GET", "/api/v1/"+token+"/software?title=app&version=0.1", ""); string(r.Body) != "123456789" {
		t.Fatalf("software: %q", r.Body)
	}
	if got := n.latestStrict(auth, id, "target_sw_tag,sw_state"); !strings.Contains(got, `"value":"beta"`) || !strings.Contains(got, "INITIATED") {
		t.Fatalf("software telemetry: %s", got)
	}

	// A URL package: fw_url instead of size and checksum; nothing to download here.
	url := n.createOta(auth, "FIRMWARE", "remote", "1", profile, `,"usesUrl":true,"url":"https://example.com/fw.bin"`)
	res = n.openPoll(ownToken, "?timeout=30000")
	n.assignDeviceOta(auth, own, "firmwareId", url)
	delivered(t, res, `{"fw_title":"remote","fw_version":"1","fw_url":"https://example.com/fw.bin"}`)
	if r := n.must(200, "GET", "/api/v1/"+ownToken+"/attributes?sharedKeys="+fwKeys+",fw_url", ""); string(r.Body) !=
		`{"shared":{"fw_title":"remote","fw_url":"https://example.com/fw.bin","fw_version":"1"}}` {
		t.Fatalf("URL package attributes: %s", r.Body)
	}
	errorBody(t, n.do("GET", "/api/v1/"+ownToken+"/firmware?title=remote&version=1", ""), 404)
	errorBody(t, n.do("GET", "/api/otaPackage/"+url+"/download", "", auth), 400)
}

// TestOtaTwoNodes: on ClickHouse + Redis, bytes uploaded through one node are
// downloaded through the other, and an assignment made on one node wakes the
// device polling the other, which can download at once.
func TestOtaTwoNodes(t *testing.T) {
	d := newDeployment(t)
	a := d.node(t, nil)
	b := d.node(t, nil)
	auth := a.tenantAuth()
	profile := a.defaultProfileID(auth)
	data := make([]byte, 2<<20+123)
	rand.Read(data)
	fw := a.newOta(auth, "FIRMWARE", "fw", "1.0", profile, data)

	if r := b.must(200, "GET", "/api/otaPackage/"+fw+"/download", "", auth); !bytes.Equal(r.Body, data) {
		t.Fatalf("download on B: %d bytes", len(r.Body))
	}
	if r := b.must(206, "GET", "/api/otaPackage/"+fw+"/download", "", auth, "Range: bytes=1048000-1049000"); !bytes.Equal(r.Body, data[1048000:1049001]) {
		t.Fatal("Range on B differs")
	}

	id, token := a.createDevice(auth, "ota-two")
	b.must(200, "POST", "/api/v1/"+token+"/telemetry", `{"warm":1}`) // B caches the device
	res := b.openPoll(token, "?timeout=30000")
	a.assignDeviceOta(auth, id, "firmwareId", fw)
	delivered(t, res, fmt.Sprintf(`{"fw_title":"fw","fw_version":"1.0","fw_size":%d,"fw_checksum_algorithm":"SHA256","fw_checksum":"%s"}`,
		len(data), sha256Hex(data)))
	if r := b.must(200, "GET", "/api/v1/"+token+"/firmware?title=fw&version=1.0", ""); !bytes.Equal(r.Body, data) {
		t.Fatalf("device download on B: %d bytes", len(r.Body))
	}
	if r := b.must(200, "GET", "/api/v1/"+token+"/firmware?title=fw&version=1.0&size=1000&chunk=2097", ""); !bytes.Equal(r.Body, data[2097000:]) {
		t.Fatalf("last chunk on B: %d bytes", len(r.Body))
	}
	if got := b.latestStrict(auth, id, "fw_state"); !strings.Contains(got, "INITIATED") {
		t.Fatalf("fw_state on B: %s", got)
	}
	errorBody(t, b.do("DELETE", "/api/otaPackage/"+fw, "", auth), 400)
	a.assignDeviceOta(auth, id, "firmwareId", "")
	b.must(200, "DELETE", "/api/otaPackage/"+fw, "", auth)
	errorBody(t, a.do("GET", "/api/otaPackage/"+fw+"/download", "", auth), 404)
}

// TestOtaUploadBody: an upload is read as any other body: compressed, it is
// decompressed within SLUICE_MAX_BODY_SIZE (413 past it, however small the
// compressed body); a body that is not multipart, has no "file" part, or ends
// before the part's closing boundary is a 400 and stores nothing.
func TestOtaUploadBody(t *testing.T) {
	n := startNode(t, func(c *config.Config) { c.Limits.MaxBodySize = 1 << 20 })
	auth := n.tenantAuth()
	profile := n.defaultProfileID(auth)
	multipartBody := func(data []byte) (string, string) {
		var body bytes.Buffer
		w := multipart.NewWriter(&body)
		w.WriteField("note", "before the file")
		part, _ := w.CreateFormFile("file", "fw.bin")
		part.Write(data)
		w.Close()
		return body.String(), w.FormDataContentType()
	}
	gz := func(s string) string {
		var b bytes.Buffer
		z := gzip.NewWriter(&b)
		z.Write([]byte(s))
		z.Close()
		return b.String()
	}
	upload := func(id, body string, headers ...string) response {
		return n.do("POST", "/api/otaPackage/"+id+"?checksumAlgorithm=SHA256", body, append([]string{auth}, headers...)...)
	}
	hasData := func(id string) bool {
		var info otaInfo
		n.must(200, "GET", "/api/otaPackage/info/"+id, "", auth).JSON(t, &info)
		return info.HasData
	}

	data := bytes.Repeat([]byte("firmware "), 50_000) // 450 kB, well under the limit
	body, typ := multipartBody(data)
	id := n.createOta(auth, "FIRMWARE", "gz", "1", profile, "")
	if r := upload(id, gz(body), "Content-Type: "+typ, "Content-Encoding: gzip"); r.Status != 200 {
		t.Fatalf("gzip upload: %d %s", r.Status, r.Body)
	}
	if got := n.must(200, "GET", "/api/otaPackage/"+id+"/download", "", auth).Body; !bytes.Equal(got, data) {
		t.Fatalf("downloaded %d bytes, want the %d uploaded", len(got), len(data))
	}

	big, bigType := multipartBody(make([]byte, 8<<20)) // 8 MiB of zeros: a few kB compressed
	id = n.createOta(auth, "FIRMWARE", "bomb", "1", profile, "")
	if r := upload(id, gz(big), "Content-Type: "+bigType, "Content-Encoding: gzip"); r.Status != 413 {
		t.Fatalf("8 MiB in gzip past a 1 MiB limit: %d %s", r.Status, r.Body)
	}
	if r := upload(id, string(data), "Content-Type: application/octet-stream"); r.Status != 400 || !strings.Contains(string(r.Body), "Required part 'file'") {
		t.Fatalf("not multipart: %d %s", r.Status, r.Body)
	}
	noFile := "--b\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nx\r\n--b--\r\n"
	if r := upload(id, noFile, "Content-Type: multipart/form-data; boundary=b"); r.Status != 400 || !strings.Contains(string(r.Body), "Required part 'file'") {
		t.Fatalf("no file part: %d %s", r.Status, r.Body)
	}
	truncated := body[:len(body)/2]
	if r := upload(id, truncated, "Content-Type: "+typ); r.Status != 400 || !strings.Contains(string(r.Body), "multipart") {
		t.Fatalf("truncated: %d %s", r.Status, r.Body)
	}
	if hasData(id) {
		t.Fatal("a refused upload stored data")
	}
}

// TestOtaPackageWithData: GET /api/otaPackage/{id} answers the info with the
// bytes as base64 "data" (ThingsBoard's OtaPackage), null for a URL package or
// one without data; tenant admins only.
func TestOtaPackageWithData(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	profile := n.defaultProfileID(auth)
	data := make([]byte, 3<<20+1) // past a stored chunk and not a multiple of 3
	rand.Read(data)
	id := n.newOta(auth, "FIRMWARE", "whole", "1", profile, data)
	var got struct {
		otaInfo
		Data *[]byte `json:"data"` // base64 in JSON
	}
	r := n.must(200, "GET", "/api/otaPackage/"+id, "", auth)
	r.JSON(t, &got)
	if got.ID.ID != id || !got.HasData || got.Data == nil || !bytes.Equal(*got.Data, data) {
		t.Fatalf("package %+v with %d bytes of data, want the %d uploaded", got.otaInfo, len(*got.Data), len(data))
	}
	for _, pkg := range []string{
		n.createOta(auth, "FIRMWARE", "empty", "1", profile, ""),
		n.createOta(auth, "FIRMWARE", "remote", "1", profile, `,"usesUrl":true,"url":"https://example.com/fw.bin"`),
	} {
		got.Data = nil
		n.must(200, "GET", "/api/otaPackage/"+pkg, "", auth).JSON(t, &got)
		if got.ID.ID != pkg || got.Data != nil {
			t.Fatalf("package without bytes: %+v data %v", got.otaInfo, got.Data)
		}
	}
	n.must(403, "GET", "/api/otaPackage/"+id, "", n.login("customer@thingsboard.org", "customer"))
	n.must(404, "GET", "/api/otaPackage/0f0e0d0c-0b0a-4908-8706-050403020100", "", auth)
}

// TestOtaURLPackageAsThingsBoardUI: ThingsBoard's UI creates a URL package
// with url and isURL (never usesUrl): the url is kept, the package has data,
// and saving back what was read is accepted. Every answer names the package
// (name: the title).
func TestOtaURLPackageAsThingsBoardUI(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	profile := n.defaultProfileID(auth)
	id := n.createOta(auth, "FIRMWARE", "remote", "1", profile, `,"url":"https://example.com/fw.bin","isURL":true`)
	var got map[string]any
	info := n.must(200, "GET", "/api/otaPackage/info/"+id, "", auth)
	info.JSON(t, &got)
	if got["url"] != "https://example.com/fw.bin" || got["hasData"] != true || got["name"] != "remote" {
		t.Fatalf("info %s", info.Body)
	}
	// Saved back as read, with a description: 200, the url kept.
	got["additionalInfo"] = map[string]any{"description": "remote firmware"}
	b, _ := json.Marshal(got)
	saved := n.must(200, "POST", "/api/otaPackage", string(b), auth)
	saved.JSON(t, &got)
	if got["url"] != "https://example.com/fw.bin" || got["hasData"] != true || got["name"] != "remote" {
		t.Fatalf("saved back %s", saved.Body)
	}
	got["url"] = "https://example.com/other.bin"
	b, _ = json.Marshal(got)
	if msg := errorBody(t, n.do("POST", "/api/otaPackage", string(b), auth), 400); msg != "Updating otaPackage URL is prohibited!" {
		t.Fatalf("changed url: %q", msg)
	}
	if msg := errorBody(t, n.do("POST", "/api/otaPackage", `{"type":"FIRMWARE","title":"t","version":"1","usesUrl":true,"url":" "}`, auth), 400); msg != "Ota package URL should be specified!" {
		t.Fatalf("usesUrl with a blank url: %q", msg)
	}

	// name in the full package and the list too.
	data := n.newOta(auth, "FIRMWARE", "local", "1", profile, []byte("firmware"))
	n.must(200, "GET", "/api/otaPackage/"+data, "", auth).JSON(t, &got)
	if got["name"] != "local" || got["data"] != "ZmlybXdhcmU=" {
		t.Fatalf("package %v", got)
	}
	var page struct{ Data []map[string]any }
	n.must(200, "GET", "/api/otaPackages?pageSize=10&page=0&sortProperty=title&sortOrder=ASC", "", auth).JSON(t, &page)
	if len(page.Data) != 2 || page.Data[0]["name"] != "local" || page.Data[1]["name"] != "remote" {
		t.Fatalf("list %v", page.Data)
	}
}

// TestOtaListNulls: a package without a value of the sort property sorts as
// PostgreSQL's NULL: last ascending, first descending.
func TestOtaListNulls(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	profile := n.defaultProfileID(auth)
	n.createOta(auth, "FIRMWARE", "empty", "1", profile, "")
	n.newOta(auth, "FIRMWARE", "small", "1", profile, []byte("1"))
	n.newOta(auth, "FIRMWARE", "big", "1", profile, []byte("12345"))
	n.createOta(auth, "FIRMWARE", "tagged", "1", profile, `,"tag":"t"`)
	for _, c := range []struct{ query, want string }{
		{"sortProperty=dataSize&sortOrder=ASC", "small,big,empty,tagged"},
		{"sortProperty=dataSize&sortOrder=DESC", "empty,tagged,big,small"},
		{"sortProperty=tag&sortOrder=ASC", "tagged,empty,small,big"},
		{"sortProperty=tag&sortOrder=DESC", "empty,small,big,tagged"},
	} {
		var page struct{ Data []otaInfo }
		n.must(200, "GET", "/api/otaPackages?pageSize=10&page=0&"+c.query, "", auth).JSON(t, &page)
		var titles []string
		for _, o := range page.Data {
			titles = append(titles, o.Title)
		}
		if got := strings.Join(titles, ","); got != c.want {
			t.Errorf("%s: %s, want %s", c.query, got, c.want)
		}
	}
}

// TestOtaDeletedWithProfile: deleting a device profile deletes its packages,
// as ThingsBoard's foreign key cascades.
func TestOtaDeletedWithProfile(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	var dp struct{ ID entityID }
	n.must(200, "POST", "/api/deviceProfile", `{"name":"doomed"}`, auth).JSON(t, &dp)
	pkg := n.newOta(auth, "FIRMWARE", "doomed", "1", dp.ID.ID, []byte("firmware"))
	if r := n.assignOta(auth, "/api/deviceProfile/"+dp.ID.ID, "/api/deviceProfile", "firmwareId", pkg); r.Status != 200 {
		t.Fatalf("assign to profile: %d %s", r.Status, r.Body)
	}
	kept := n.createOta(auth, "FIRMWARE", "kept", "1", n.defaultProfileID(auth), "")
	n.must(200, "DELETE", "/api/deviceProfile/"+dp.ID.ID, "", auth)
	errorBody(t, n.do("GET", "/api/otaPackage/info/"+pkg, "", auth), 404)
	errorBody(t, n.do("GET", "/api/otaPackage/"+pkg+"/download", "", auth), 404)
	n.must(200, "GET", "/api/otaPackage/info/"+kept, "", auth)
	// The title and version are free again.
	n.createOta(auth, "FIRMWARE", "doomed", "1", n.defaultProfileID(auth), "")
}
