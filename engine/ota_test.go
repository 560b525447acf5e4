package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// newTestOta creates a firmware package of p's tenant for the default profile.
func (te *testEngine) newTestOta(t *testing.T, p *Principal, title, version string) *OtaPackageInfo {
	t.Helper()
	ctx := context.Background()
	dp, err := te.defaultProfile(ctx, p.TenantID)
	if err != nil {
		t.Fatal(err)
	}
	info, err := te.SaveOtaPackageInfo(ctx, p, &SaveOtaPackageInfoRequest{OtaPackageInfo: OtaPackageInfo{
		Type: OtaFirmware, Title: title, Version: version, DeviceProfileID: &dp.ID}})
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestOtaDataChunks: bytes spanning several storage chunks read back exactly by
// any range, from storage and from the node cache.
func TestOtaDataChunks(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	data := make([]byte, 2*otaChunkSize+otaChunkSize/2)
	rand.Read(data)
	info := te.newTestOta(t, admin, "big", "1")
	saved, err := te.SaveOtaPackageData(ctx, admin, info.ID.ID, OtaUpload{
		ChecksumAlgorithm: "sha256", FileName: "big.bin", Data: bytes.NewReader(data)})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Checksum(ChecksumSHA256, data)
	if *saved.Checksum != want || *saved.ChecksumAlgorithm != ChecksumSHA256 || *saved.DataSize != int64(len(data)) || *saved.ContentType != "application/octet-stream" {
		t.Fatalf("saved %+v", saved)
	}
	d, err := te.DownloadOtaPackage(ctx, admin, info.ID.ID)
	if err != nil {
		t.Fatal(err)
	}
	f := func(off, n int64) {
		t.Helper()
		got, err := io.ReadAll(d.Reader(ctx, off, n))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data[off:off+n]) {
			t.Fatalf("range %d+%d: %d bytes differ", off, n, len(got))
		}
	}
	f(0, int64(len(data)))
	f(0, int64(len(data))) // cached
	f(otaChunkSize-3, 7)   // across a chunk boundary
	f(2*otaChunkSize, otaChunkSize/2)
	f(int64(len(data))-1, 1)
	f(5, 0)

	// Deleting the package deletes every chunk and the description.
	wantCode(t, te.DeleteOtaPackage(ctx, admin, info.ID.ID), 0)
	if _, err := te.store.Get(ctx, kindOtaChunk, otaChunkID(d.dataID, 0)); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("chunk 0 after delete: %v", err)
	}
	if _, err := te.store.Get(ctx, kindOtaData, d.dataID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("data record after delete: %v", err)
	}
}

// TestOtaDataRace: of uploads racing for one package exactly one wins, and the
// package holds the winner's bytes.
func TestOtaDataRace(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	info := te.newTestOta(t, admin, "race", "1")
	const uploads = 8
	var wg sync.WaitGroup
	results := make([]*OtaPackageInfo, uploads)
	errs := make([]error, uploads)
	for i := range uploads {
		wg.Go(func() {
			data := bytes.Repeat([]byte{byte(i)}, 1000+i)
			results[i], errs[i] = te.SaveOtaPackageData(ctx, admin, info.ID.ID, OtaUpload{
				ChecksumAlgorithm: "MD5", FileName: "f", Data: bytes.NewReader(data)})
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("uploads %d and %d both succeeded", winner, i)
		case err == nil:
			winner = i
		default:
			wantCode(t, err, CodeBadRequestParams)
		}
	}
	if winner < 0 {
		t.Fatal("no upload succeeded")
	}
	got, err := te.GetOtaPackageInfo(ctx, admin, info.ID.ID)
	if err != nil {
		t.Fatal(err)
	}
	if *got.DataSize != int64(1000+winner) || *got.Checksum != *results[winner].Checksum {
		t.Fatalf("stored %d bytes %s, winner %d wrote %s", *got.DataSize, *got.Checksum, winner, *results[winner].Checksum)
	}
}

// TestOtaAccess: tenant isolation and roles.
func TestOtaAccess(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin, customer := te.tenantAdmin(t), te.customerUser(t)
	other := te.newTenant(t, "other", "other@example.com")
	info := te.newTestOta(t, admin, "fw", "1")
	_, err := te.SaveOtaPackageData(ctx, admin, info.ID.ID, OtaUpload{ChecksumAlgorithm: "CRC32", FileName: "f", Data: bytes.NewReader([]byte("123456789"))})
	wantCode(t, err, 0)

	_, err = te.GetOtaPackageInfo(ctx, customer, info.ID.ID)
	wantCode(t, err, 0)
	_, err = te.GetOtaPackageInfo(ctx, other, info.ID.ID)
	wantCode(t, err, CodeItemNotFound)
	_, err = te.GetOtaPackageInfo(ctx, te.sysadmin(t), info.ID.ID)
	wantCode(t, err, CodePermissionDenied)
	_, err = te.DownloadOtaPackage(ctx, customer, info.ID.ID)
	wantCode(t, err, CodePermissionDenied)
	_, err = te.DownloadOtaPackage(ctx, other, info.ID.ID)
	wantCode(t, err, CodeItemNotFound)
	wantCode(t, te.DeleteOtaPackage(ctx, other, info.ID.ID), CodeItemNotFound)
	page, err := te.ListOtaPackages(ctx, other, PageLink{PageSize: 10}, uuid.Nil, "")
	if err != nil || page.TotalElements != 0 {
		t.Fatalf("other tenant lists %d packages, %v", page.TotalElements, err)
	}

	// Another tenant's package cannot be assigned; a package of another profile neither.
	_, err = te.SaveDevice(ctx, other, &Device{Name: "d", FirmwareID: &info.ID}, "")
	wantCode(t, err, CodeBadRequestParams)
	_, err = te.SaveDevice(ctx, admin, &Device{Name: "d", Type: "another", FirmwareID: &info.ID}, "")
	wantCode(t, err, CodeBadRequestParams)
	_, err = te.SaveDevice(ctx, admin, &Device{Name: "d", SoftwareID: &info.ID}, "")
	wantCode(t, err, CodeBadRequestParams)
}

// TestOtaWritesOverWhatTheyRead: an upload finishing after an info update
// keeps the update, and one finishing after the package was deleted does not
// bring it back (SaveOtaPackageData then removes the bytes).
func TestOtaWritesOverWhatTheyRead(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	upload := func(info *OtaPackageInfo) (*otaRecord, uuid.UUID, *otaData) {
		t.Helper()
		r, err := te.loadOta(ctx, admin.TenantID, info.ID.ID) // what the upload read
		if err != nil {
			t.Fatal(err)
		}
		dataID := newID()
		d := &otaData{PackageID: info.ID.ID, FileName: "f.bin", ContentType: "application/octet-stream", ChecksumAlgorithm: "SHA256", Checksum: "x"}
		if d.Size, err = te.writeOtaChunks(ctx, dataID, bytes.NewReader([]byte("firmware"))); err != nil {
			t.Fatal(err)
		}
		if err := te.claimOtaData(ctx, r, dataID, d); err != nil {
			t.Fatal(err)
		}
		return r, dataID, d
	}

	info := te.newTestOta(t, admin, "updated", "1")
	r, dataID, d := upload(info)
	update := *info
	update.AdditionalInfo = []byte(`{"description":"meanwhile"}`)
	if _, err := te.SaveOtaPackageInfo(ctx, admin, &SaveOtaPackageInfoRequest{OtaPackageInfo: update}); err != nil {
		t.Fatal(err)
	}
	if _, err := te.finishOtaData(ctx, r, dataID, d); err != nil {
		t.Fatal(err)
	}
	got, err := te.GetOtaPackageInfo(ctx, admin, info.ID.ID)
	if err != nil || !got.HasData || string(got.AdditionalInfo) != `{"description":"meanwhile"}` {
		t.Fatalf("after an update and an upload: %+v %s (%v)", got, got.AdditionalInfo, err)
	}

	info = te.newTestOta(t, admin, "deleted", "1")
	r, dataID, d = upload(info)
	if err := te.deleteRecord(ctx, kindOtaPackage, info.ID.ID); err != nil { // as DeleteOtaPackage's, past its first pass over the bytes
		t.Fatal(err)
	}
	if _, err := te.finishOtaData(ctx, r, dataID, d); !errors.Is(err, ErrNotFound) {
		t.Fatalf("finishing the upload of a deleted package: %v, want not found", err)
	}
	if _, err := te.GetOtaPackageInfo(ctx, admin, info.ID.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the deleted package came back: %v", err)
	}
}

// TestOtaURLWithoutUsesURL: a url is kept whatever usesUrl says (ThingsBoard's
// UI never sends it), usesUrl only requires one, and a package saved back
// unchanged is accepted.
func TestOtaURLWithoutUsesURL(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	str := func(s string) *string { return &s }
	save := func(in SaveOtaPackageInfoRequest) (*OtaPackageInfo, error) {
		return te.SaveOtaPackageInfo(ctx, admin, &in)
	}

	info, err := save(SaveOtaPackageInfoRequest{OtaPackageInfo: OtaPackageInfo{
		Type: OtaFirmware, Title: "remote", Version: "1", URL: str("https://example.com/fw.bin")}})
	if err != nil {
		t.Fatal(err)
	}
	if strOf(info.URL) != "https://example.com/fw.bin" || !info.HasData || info.Name != "remote" {
		t.Fatalf("created %+v", info)
	}
	// Saved back as read, with or without usesUrl: accepted, the url kept.
	back := *info
	back.AdditionalInfo = []byte(`{"description":"d"}`)
	for _, uses := range []bool{false, true} {
		got, err := save(SaveOtaPackageInfoRequest{OtaPackageInfo: back, UsesURL: uses})
		if err != nil {
			t.Fatalf("saved back (usesUrl %v): %v", uses, err)
		}
		if strOf(got.URL) != "https://example.com/fw.bin" || !got.HasData || string(got.AdditionalInfo) != `{"description":"d"}` {
			t.Fatalf("saved back (usesUrl %v): %+v", uses, got)
		}
	}
	// The url still cannot change, nor be dropped.
	changed := back
	changed.URL = str("https://example.com/other.bin")
	_, err = save(SaveOtaPackageInfoRequest{OtaPackageInfo: changed})
	wantCode(t, err, CodeBadRequestParams)
	changed.URL = nil
	_, err = save(SaveOtaPackageInfoRequest{OtaPackageInfo: changed})
	wantCode(t, err, CodeBadRequestParams)
	// A URL package takes no bytes.
	_, err = te.SaveOtaPackageData(ctx, admin, info.ID.ID, OtaUpload{ChecksumAlgorithm: "MD5", FileName: "f", Data: bytes.NewReader([]byte("x"))})
	wantCode(t, err, CodeBadRequestParams)

	// usesUrl requires a url that is not blank; a blank url without it is none.
	for _, url := range []*string{nil, str(""), str("  ")} {
		_, err = save(SaveOtaPackageInfoRequest{OtaPackageInfo: OtaPackageInfo{
			Type: OtaFirmware, Title: "blank", Version: "1", URL: url}, UsesURL: true})
		if err == nil || err.Error() != errOtaURLBlank.Msg {
			t.Fatalf("usesUrl with url %v: %v", url, err)
		}
	}
	blank, err := save(SaveOtaPackageInfoRequest{OtaPackageInfo: OtaPackageInfo{
		Type: OtaFirmware, Title: "blank", Version: "1", URL: str(" ")}})
	if err != nil || blank.URL != nil || blank.HasData {
		t.Fatalf("blank url without usesUrl: %+v, %v", blank, err)
	}
	// A data package saved back unchanged is accepted too.
	data := te.newTestOta(t, admin, "data", "1")
	if _, err := te.SaveOtaPackageData(ctx, admin, data.ID.ID, OtaUpload{ChecksumAlgorithm: "MD5", FileName: "f", Data: bytes.NewReader([]byte("x"))}); err != nil {
		t.Fatal(err)
	}
	full, err := te.GetOtaPackageInfo(ctx, admin, data.ID.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := save(SaveOtaPackageInfoRequest{OtaPackageInfo: *full}); err != nil || got.URL != nil || !got.HasData || *got.DataSize != 1 {
		t.Fatalf("data package saved back: %+v, %v", got, err)
	}
}

// TestOtaName: every answer has name, the title (ThingsBoard's read-only
// getName()), whatever the request said.
func TestOtaName(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	info, err := te.SaveOtaPackageInfo(ctx, admin, &SaveOtaPackageInfoRequest{OtaPackageInfo: OtaPackageInfo{
		Type: OtaFirmware, Title: "fw", Version: "1", Name: "not the title"}})
	if err != nil || info.Name != "fw" {
		t.Fatalf("created %+v, %v", info, err)
	}
	b, err := json.Marshal(info)
	if err != nil || !strings.Contains(string(b), `"name":"fw"`) {
		t.Fatalf("JSON %s, %v", b, err)
	}
	// A record stored without the field (before it existed) reads with it.
	if _, err := te.updateOta(ctx, admin.TenantID, info.ID.ID, func(r *otaRecord) error { r.Name = ""; return nil }); err != nil {
		t.Fatal(err)
	}
	got, err := te.GetOtaPackageInfo(ctx, admin, info.ID.ID)
	if err != nil || got.Name != "fw" {
		t.Fatalf("info %+v, %v", got, err)
	}
	update := *got
	update.Name = "renamed"
	if got, err = te.SaveOtaPackageInfo(ctx, admin, &SaveOtaPackageInfoRequest{OtaPackageInfo: update}); err != nil || got.Name != "fw" {
		t.Fatalf("updated %+v, %v", got, err)
	}
	if got, err = te.SaveOtaPackageData(ctx, admin, info.ID.ID, OtaUpload{ChecksumAlgorithm: "MD5", FileName: "f", Data: bytes.NewReader([]byte("x"))}); err != nil || got.Name != "fw" {
		t.Fatalf("uploaded %+v, %v", got, err)
	}
	if got, _, err = te.GetOtaPackage(ctx, admin, info.ID.ID); err != nil || got.Name != "fw" {
		t.Fatalf("package %+v, %v", got, err)
	}
	page, err := te.ListOtaPackages(ctx, admin, PageLink{PageSize: 10}, uuid.Nil, "")
	if err != nil || len(page.Data) != 1 || page.Data[0].Name != "fw" {
		t.Fatalf("list %+v, %v", page, err)
	}
}

// TestOtaSortNulls: absent values sort as PostgreSQL's NULL, last ascending
// and first descending.
func TestOtaSortNulls(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	str := func(s string) *string { return &s }
	for _, in := range []OtaPackageInfo{
		{Type: OtaFirmware, Title: "none", Version: "1"},
		{Type: OtaFirmware, Title: "b", Version: "1", Tag: str("b"), URL: str("https://b")},
		{Type: OtaFirmware, Title: "a", Version: "1", Tag: str("a"), URL: str("https://a")},
	} {
		if _, err := te.SaveOtaPackageInfo(ctx, admin, &SaveOtaPackageInfoRequest{OtaPackageInfo: in}); err != nil {
			t.Fatal(err)
		}
	}
	small := te.newTestOta(t, admin, "small", "1")
	big := te.newTestOta(t, admin, "big", "1")
	for id, n := range map[uuid.UUID]int{small.ID.ID: 1, big.ID.ID: 5} {
		if _, err := te.SaveOtaPackageData(ctx, admin, id, OtaUpload{ChecksumAlgorithm: "MD5", FileName: "f", Data: bytes.NewReader(make([]byte, n))}); err != nil {
			t.Fatal(err)
		}
	}
	titles := func(prop, order string) string {
		t.Helper()
		page, err := te.ListOtaPackages(ctx, admin, PageLink{PageSize: 10, SortProperty: prop, SortOrder: order}, uuid.Nil, "")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, o := range page.Data {
			out = append(out, o.Title)
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct{ prop, order, want string }{
		// Equal keys (the NULLs) keep creation order either way.
		{"tag", "ASC", "a,b,none,small,big"},
		{"tag", "DESC", "none,small,big,b,a"},
		{"url", "ASC", "a,b,none,small,big"},
		{"url", "DESC", "none,small,big,b,a"},
		{"dataSize", "ASC", "small,big,none,b,a"},
		{"dataSize", "DESC", "none,b,a,big,small"},
		{"fileName", "ASC", "small,big,none,b,a"},
		{"checksum", "DESC", "none,b,a,"},
	} {
		got := titles(c.prop, c.order)
		if c.prop == "checksum" { // the checksums' own order is random: only the NULLs are checked
			got = got[:len("none,b,a,")]
		}
		if got != c.want {
			t.Errorf("sort by %s %s: %s, want %s", c.prop, c.order, got, c.want)
		}
	}
}

// TestDeleteProfileDeletesOta: deleting a device profile deletes the packages
// that name it, bytes included (ThingsBoard's ON DELETE CASCADE), and no other;
// a deletion interrupted before the packages went is finished by the next.
func TestDeleteProfileDeletesOta(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	other := te.newTenant(t, "other", "other@example.com")
	newPkg := func(p *Principal, profile *EntityID, title string, data bool) *OtaPackageInfo {
		t.Helper()
		info, err := te.SaveOtaPackageInfo(ctx, p, &SaveOtaPackageInfoRequest{OtaPackageInfo: OtaPackageInfo{
			Type: OtaFirmware, Title: title, Version: "1", DeviceProfileID: profile}})
		if err != nil {
			t.Fatal(err)
		}
		if data {
			if info, err = te.SaveOtaPackageData(ctx, p, info.ID.ID, OtaUpload{ChecksumAlgorithm: "MD5", FileName: "f", Data: bytes.NewReader([]byte("firmware"))}); err != nil {
				t.Fatal(err)
			}
		}
		return info
	}
	gone := func(info *OtaPackageInfo) bool {
		t.Helper()
		_, err := getRecord[otaRecord](ctx, te.Engine, kindOtaPackage, info.ID.ID)
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			t.Fatal(err)
		}
		return err != nil
	}

	dp, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "doomed"})
	if err != nil {
		t.Fatal(err)
	}
	withData := newPkg(admin, &dp.ID, "doomed-data", true)
	empty := newPkg(admin, &dp.ID, "doomed-empty", false)
	r, err := te.loadOta(ctx, admin.TenantID, withData.ID.ID)
	if err != nil {
		t.Fatal(err)
	}
	kept := newPkg(admin, nil, "kept", true)
	def, err := te.defaultProfile(ctx, admin.TenantID)
	if err != nil {
		t.Fatal(err)
	}
	keptOfDefault := newPkg(admin, &def.ID, "kept-default", false)
	otherDp, err := te.defaultProfile(ctx, other.TenantID)
	if err != nil {
		t.Fatal(err)
	}
	otherPkg := newPkg(other, &otherDp.ID, "other", false)
	// The profile has its own package: no obstacle, it goes too.
	dp.FirmwareID = &withData.ID
	if _, err := te.SaveDeviceProfile(ctx, admin, dp); err != nil {
		t.Fatal(err)
	}

	// In use by a device: refused, and nothing is deleted.
	d, err := te.SaveDevice(ctx, admin, &Device{Name: "on-doomed", DeviceProfileID: dp.ID}, "")
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, te.DeleteDeviceProfile(ctx, admin, dp.ID.ID), CodeBadRequestParams)
	if gone(withData) || gone(empty) {
		t.Fatal("a refused profile deletion deleted its packages")
	}
	wantCode(t, te.DeleteDevice(ctx, admin, d.ID.ID), 0)

	wantCode(t, te.DeleteDeviceProfile(ctx, admin, dp.ID.ID), 0)
	if !gone(withData) || !gone(empty) {
		t.Fatal("the packages of a deleted profile are left")
	}
	if gone(kept) || gone(keptOfDefault) || gone(otherPkg) {
		t.Fatal("a package of no profile, another profile or another tenant was deleted")
	}
	if _, err := te.store.Get(ctx, kindOtaChunk, otaChunkID(r.DataID, 0)); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("chunk 0 after the profile's deletion: %v", err)
	}
	if _, err := te.store.Lookup(ctx, kindOtaData, otaDataKey(withData.ID.ID)); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("data record after the profile's deletion: %v", err)
	}

	// Interrupted after the profile went: the next deletion (404) finishes.
	dp2, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "crashed"})
	if err != nil {
		t.Fatal(err)
	}
	orphan := newPkg(admin, &dp2.ID, "orphan", true)
	if err := te.deleteRecord(ctx, kindProfile, dp2.ID.ID); err != nil {
		t.Fatal(err)
	}
	wantCode(t, te.DeleteDeviceProfile(ctx, other, dp2.ID.ID), CodeItemNotFound)
	if gone(orphan) {
		t.Fatal("another tenant's deletion removed the package")
	}
	wantCode(t, te.DeleteDeviceProfile(ctx, admin, dp2.ID.ID), CodeItemNotFound)
	if !gone(orphan) {
		t.Fatal("the package of a profile deleted before is left")
	}

	// A profile being deleted takes no new package.
	dp3, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "marked"})
	if err != nil {
		t.Fatal(err)
	}
	if err := te.markProfileDeleting(ctx, admin, dp3.ID.ID, "test", true); err != nil {
		t.Fatal(err)
	}
	_, err = te.SaveOtaPackageInfo(ctx, admin, &SaveOtaPackageInfoRequest{OtaPackageInfo: OtaPackageInfo{
		Type: OtaFirmware, Title: "late", Version: "1", DeviceProfileID: &dp3.ID}})
	if err == nil || err.Error() != errOtaBadProfile.Msg {
		t.Fatalf("package of a profile being deleted: %v", err)
	}
}

// TestDeleteProfileRacingOtaCreate: packages created while their profile is
// deleted are never left naming a deleted profile.
func TestDeleteProfileRacingOtaCreate(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	for round := range 20 {
		dp, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "p" + strconv.Itoa(round)})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; ; i++ {
				_, err := te.SaveOtaPackageInfo(ctx, admin, &SaveOtaPackageInfoRequest{OtaPackageInfo: OtaPackageInfo{
					Type: OtaFirmware, Title: "r" + strconv.Itoa(round), Version: strconv.Itoa(i), DeviceProfileID: &dp.ID}})
				if err != nil {
					if err.Error() != errOtaBadProfile.Msg {
						t.Errorf("create: %v", err)
					}
					return
				}
			}
		})
		wantCode(t, te.DeleteDeviceProfile(ctx, admin, dp.ID.ID), 0)
		wg.Wait()
		pkgs, err := listRecords[otaRecord](ctx, te.Engine, kindOtaPackage, admin.TenantID)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range pkgs {
			if idOf(r.DeviceProfileID) == dp.ID.ID {
				t.Fatalf("round %d: package %s %s names the deleted profile", round, r.Title, r.Version)
			}
		}
	}
}
