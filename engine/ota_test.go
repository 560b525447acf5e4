package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
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
