package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// OTA packages (compat §5): firmware and software images of a tenant, title and
// version unique per tenant. The info is a record of kind otaPackage; the bytes
// live in the back end too (otadata.go). Assigning a package to a device or its
// profile sets the device's fw_* (sw_*) shared attributes at once (ota_assign.go).

// EntityOtaPackage is the entity type of package ids.
const EntityOtaPackage = "OTA_PACKAGE"

// Package types.
const (
	OtaFirmware = "FIRMWARE"
	OtaSoftware = "SOFTWARE"
)

const kindOtaPackage = "otaPackage"

// otaTitleKey keeps title+version unique per tenant (ThingsBoard's
// ota_package_tenant_title_version_unq_key: the type is not part of it). The
// title's length comes first so that no title/version pair can spell another.
func otaTitleKey(tenant uuid.UUID, title, version string) string {
	return "title:" + tenant.String() + "/" + strconv.Itoa(len(title)) + ":" + title + "/" + version
}

// OtaPackageInfo is a package without its bytes, as ThingsBoard writes it.
// Name is ThingsBoard's read-only getName(): the title, whatever a request says
// (otaRecord.info sets it).
type OtaPackageInfo struct {
	ID                EntityID        `json:"id"`
	CreatedTime       int64           `json:"createdTime"`
	TenantID          EntityID        `json:"tenantId"`
	DeviceProfileID   *EntityID       `json:"deviceProfileId"`
	Type              string          `json:"type"`
	Title             string          `json:"title"`
	Name              string          `json:"name"`
	Version           string          `json:"version"`
	Tag               *string         `json:"tag"`
	URL               *string         `json:"url"`
	HasData           bool            `json:"hasData"`
	FileName          *string         `json:"fileName"`
	ContentType       *string         `json:"contentType"`
	ChecksumAlgorithm *string         `json:"checksumAlgorithm"`
	Checksum          *string         `json:"checksum"`
	DataSize          *int64          `json:"dataSize"`
	ExternalID        *EntityID       `json:"externalId"`
	AdditionalInfo    json.RawMessage `json:"additionalInfo"`
}

// SaveOtaPackageInfoRequest is the body of POST /api/otaPackage: the info, and
// whether the package is a URL instead of uploaded bytes. As in ThingsBoard,
// usesUrl only requires a url: a url given without it is kept all the same
// (ThingsBoard's UI sends url and isURL, never usesUrl).
type SaveOtaPackageInfoRequest struct {
	OtaPackageInfo
	UsesURL bool `json:"usesUrl"`
}

// otaRecord is what is stored: the info and, once uploaded, the id of its bytes.
// Deleting marks a package whose deletion is under way (see DeleteOtaPackage,
// deletionMarks):
// it can no longer be newly assigned, but until it is gone it is otherwise as
// any other, read, listed and downloaded by users and devices alike, for the
// deletion may yet be refused. The API never shows the field.
type otaRecord struct {
	OtaPackageInfo
	DataID uuid.UUID `json:"dataId"`
	deletionMarks
}

func (r *otaRecord) hasURL() bool   { return r.URL != nil && *r.URL != "" }
func (r *otaRecord) hasBytes() bool { return r.DataID != uuid.Nil }

// info is the package as the API shows it: a copy, with name the title.
func (r *otaRecord) info() *OtaPackageInfo {
	info := r.OtaPackageInfo
	info.Name = info.Title
	return &info
}

var (
	errOtaTitleTaken     = &Error{Code: CodeBadRequestParams, Msg: "OtaPackage with such title and version already exists!"}
	errOtaTitleBlank     = &Error{Code: CodeBadRequestParams, Msg: "OtaPackage title should be specified!"}
	errOtaVersionBlank   = &Error{Code: CodeBadRequestParams, Msg: "OtaPackage version should be specified!"}
	errOtaTypeBlank      = &Error{Code: CodeBadRequestParams, Msg: "Type should be specified!"}
	errOtaURLBlank       = &Error{Code: CodeBadRequestParams, Msg: "Ota package URL should be specified!"}
	errOtaBadProfile     = &Error{Code: CodeBadRequestParams, Msg: "OtaPackage is referencing to non-existent device profile!"}
	errOtaWrongFile      = &Error{Code: CodeBadRequestParams, Msg: "Wrong otaPackage file!"}
	errOtaDataSet        = &Error{Code: CodeBadRequestParams, Msg: "Updating otaPackage data is prohibited!"}
	errOtaDataEmpty      = &Error{Code: CodeBadRequestParams, Msg: "OtaPackage data should be specified!"}
	errOtaFileNameBlank  = &Error{Code: CodeBadRequestParams, Msg: "OtaPackage file name should be specified!"}
	errOtaFileWithURL    = &Error{Code: CodeBadRequestParams, Msg: "File can't be saved if URL present!"}
	errOtaUnknownSum     = &Error{Code: CodeBadRequestParams, Msg: "Unknown checksum algorithm!"}
	errOtaNoData         = &Error{Code: CodeItemNotFound, Msg: "OtaPackage has no data!"}
	errOtaURLDownload    = &Error{Code: CodeBadRequestParams, Msg: "OtaPackage is a URL: download it there"}
	errOtaBadType        = &Error{Code: CodeBadRequestParams, Msg: "Unsupported OTA package type"}
	errOtaTooLongTitle   = &Error{Code: CodeBadRequestParams, Msg: "The length of title should be equal or shorter than 255"}
	errOtaTooLongVersion = &Error{Code: CodeBadRequestParams, Msg: "The length of version should be equal or shorter than 255"}
)

// ParseOtaType accepts FIRMWARE and SOFTWARE.
func ParseOtaType(s string) (string, error) {
	if s == OtaFirmware || s == OtaSoftware {
		return s, nil
	}
	return "", errOtaBadType
}

// loadOta returns a package of tenant; another tenant's is not found.
func (e *Engine) loadOta(ctx context.Context, tenant, id uuid.UUID) (*otaRecord, error) {
	r, err := getRecord[otaRecord](ctx, e, kindOtaPackage, id)
	if err != nil {
		return nil, notFound(err)
	}
	if r.TenantID.ID != tenant {
		return nil, ErrNotFound
	}
	return r, nil
}

// updateOta reads a package of tenant, changes it and writes it over the
// version read, again when another write came between: an info update and an
// upload finishing at once both keep their change, a deletion mark set
// meanwhile is kept, and a package deleted meanwhile stays deleted
// (ErrNotFound).
func (e *Engine) updateOta(ctx context.Context, tenant, id uuid.UUID, change func(*otaRecord) error) (*otaRecord, error) {
	for range maxReplaceTries {
		r, prev, err := loadRecord[otaRecord](ctx, e, kindOtaPackage, id)
		if err != nil {
			return nil, notFound(err)
		}
		if r.TenantID.ID != tenant {
			return nil, ErrNotFound
		}
		if err := change(r); err != nil {
			return nil, err
		}
		err = e.replaceRecord(ctx, kindOtaPackage, id, tenant, prev, r, otaTitleKey(tenant, r.Title, r.Version))
		switch {
		case errors.Is(err, storage.ErrChanged):
			continue
		case errors.Is(err, storage.ErrConflict):
			return nil, errOtaTitleTaken
		case err != nil:
			return nil, notFound(err)
		}
		return r, nil
	}
	return nil, errChangedMeanwhile
}

func (e *Engine) putOta(ctx context.Context, r *otaRecord) error {
	tenant := r.TenantID.ID
	err := e.putRecord(ctx, kindOtaPackage, r.ID.ID, tenant, r, otaTitleKey(tenant, r.Title, r.Version))
	if errors.Is(err, storage.ErrConflict) {
		return errOtaTitleTaken
	}
	return err
}

// SaveOtaPackageInfo creates a package of p's tenant (zero ID) or updates one
// (tenant admins only). Only additionalInfo may change on update: title, version,
// type, tag, profile and URL are fixed, as in ThingsBoard (saving a package back
// unchanged is fine). A URL package (a non-blank url, whatever usesUrl says)
// has data at once; any other gets its bytes from SaveOtaPackageData.
//
// A new package of a profile whose deletion is under way is refused, and one
// whose profile was marked or deleted while it was written is taken back, so
// that DeleteDeviceProfile, which deletes the profile's packages after the
// profile, leaves none behind: either this second read of the profile comes
// before the mark, and then the package was written before the deletion lists
// the packages, or it comes after and sees the mark (or no profile).
func (e *Engine) SaveOtaPackageInfo(ctx context.Context, p *Principal, in *SaveOtaPackageInfoRequest) (*OtaPackageInfo, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	if err := e.checkOtaInfo(ctx, p.TenantID, in); err != nil {
		return nil, err
	}
	if in.ID.ID != uuid.Nil {
		r, err := e.updateOta(ctx, p.TenantID, in.ID.ID, func(old *otaRecord) error {
			if err := checkOtaUpdate(&old.OtaPackageInfo, &in.OtaPackageInfo); err != nil {
				return err
			}
			old.AdditionalInfo = in.AdditionalInfo
			return nil
		})
		if err != nil {
			return nil, err
		}
		return r.info(), nil
	}
	if err := e.checkOtaProfileUsable(ctx, in.DeviceProfileID); err != nil {
		return nil, err
	}
	r := &otaRecord{OtaPackageInfo: in.OtaPackageInfo}
	r.ID = newEntityID(EntityOtaPackage, newID())
	r.CreatedTime = e.now().UnixMilli()
	r.TenantID = newEntityID(EntityTenant, p.TenantID)
	r.Name = r.Title
	r.HasData = r.hasURL()
	r.FileName, r.ContentType, r.ChecksumAlgorithm, r.Checksum, r.DataSize = nil, nil, nil, nil, nil
	if err := e.putOta(ctx, r); err != nil {
		return nil, err
	}
	if err := e.checkOtaProfileUsable(ctx, r.DeviceProfileID); err != nil {
		// Taken back; an upload begun meanwhile (the id listed) finds the
		// package gone and removes its own bytes (SaveOtaPackageData).
		if derr := e.deleteRecord(ctx, kindOtaPackage, r.ID.ID); derr != nil && !errors.Is(derr, storage.ErrNotFound) {
			return nil, errors.Join(err, derr)
		}
		return nil, err
	}
	return r.info(), nil
}

// checkOtaProfileUsable fails with errOtaBadProfile when the profile a new
// package names (nil: none) is gone or being deleted (see SaveOtaPackageInfo).
func (e *Engine) checkOtaProfileUsable(ctx context.Context, profile *EntityID) error {
	if profile == nil {
		return nil
	}
	ok, err := e.usableProfile(ctx, profile.ID)
	switch {
	case err != nil:
		return err
	case !ok:
		return errOtaBadProfile
	}
	return nil
}

// checkOtaInfo validates the fields of a saved info (BaseOtaPackageDataValidator).
func (e *Engine) checkOtaInfo(ctx context.Context, tenant uuid.UUID, in *SaveOtaPackageInfoRequest) error {
	switch {
	case strings.TrimSpace(in.Title) == "":
		return errOtaTitleBlank
	case in.Type == "":
		return errOtaTypeBlank
	case in.Version == "":
		return errOtaVersionBlank
	case len(in.Title) > 255:
		return errOtaTooLongTitle
	case len(in.Version) > 255:
		return errOtaTooLongVersion
	}
	if _, err := ParseOtaType(in.Type); err != nil {
		return err
	}
	// ThingsBoard keeps the url of the request and checks it only with
	// usesUrl (BaseOtaPackageService.saveOtaPackageInfo); a blank one is none.
	if in.URL != nil && strings.TrimSpace(*in.URL) == "" {
		in.URL = nil
	}
	if in.UsesURL && in.URL == nil {
		return errOtaURLBlank
	}
	if in.Tag != nil && *in.Tag == "" {
		in.Tag = nil
	}
	if in.DeviceProfileID != nil && isNull(in.DeviceProfileID.ID) {
		in.DeviceProfileID = nil
	}
	if in.DeviceProfileID != nil {
		dp, err := getRecord[DeviceProfile](ctx, e, kindProfile, in.DeviceProfileID.ID)
		if err != nil {
			return ifNotFound(err, errOtaBadProfile)
		}
		if dp.TenantID.ID != tenant {
			return errOtaBadProfile
		}
		in.DeviceProfileID = &dp.ID
	}
	return nil
}

func checkOtaUpdate(old, in *OtaPackageInfo) error {
	prohibited := func(what string) error {
		return Errorf(CodeBadRequestParams, "Updating otaPackage %s is prohibited!", what)
	}
	switch {
	case old.Type != in.Type:
		return &Error{Code: CodeBadRequestParams, Msg: "Updating type is prohibited!"}
	case old.Title != in.Title:
		return prohibited("title")
	case old.Version != in.Version:
		return prohibited("version")
	case strOf(old.Tag) != strOf(in.Tag):
		return prohibited("tag")
	case idOf(old.DeviceProfileID) != idOf(in.DeviceProfileID):
		return prohibited("deviceProfile")
	case strOf(old.URL) != strOf(in.URL):
		return prohibited("URL")
	}
	return nil
}

func strOf(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func idOf(id *EntityID) uuid.UUID {
	if id == nil {
		return uuid.Nil
	}
	return id.ID
}

// OtaUpload is the file part of POST /api/otaPackage/{id}.
type OtaUpload struct {
	// ChecksumAlgorithm is a ThingsBoard algorithm name (any case); Checksum, if
	// not empty, must equal what the bytes give.
	ChecksumAlgorithm string
	Checksum          string
	FileName          string
	// ContentType defaults to application/octet-stream.
	ContentType string
	Data        io.Reader
}

// SaveOtaPackageData stores the bytes of a package of p's tenant (tenant admins
// only). The bytes are written in chunks while the checksum is computed; a wrong
// given checksum is 400 "Wrong otaPackage file!" and nothing is kept. Bytes once
// set cannot change (400), also when two uploads race.
func (e *Engine) SaveOtaPackageData(ctx context.Context, p *Principal, id uuid.UUID, up OtaUpload) (*OtaPackageInfo, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	r, err := e.loadOta(ctx, p.TenantID, id)
	if err != nil {
		return nil, err
	}
	sum, algorithm, ok := newChecksum(up.ChecksumAlgorithm)
	switch {
	case !ok:
		return nil, errOtaUnknownSum
	case r.hasURL():
		return nil, errOtaFileWithURL
	case r.hasBytes():
		return nil, errOtaDataSet
	case up.FileName == "":
		return nil, errOtaFileNameBlank
	}
	if up.ContentType == "" {
		up.ContentType = "application/octet-stream"
	}
	// maxOtaPackagesInBytes of the tenant's profile: reading past it fails.
	if up.Data, err = e.limitOtaUpload(ctx, p.TenantID, up.Data); err != nil {
		return nil, err
	}
	d := &otaData{PackageID: id, FileName: up.FileName, ContentType: up.ContentType, ChecksumAlgorithm: algorithm}
	dataID := newID()
	if d.Size, err = e.writeOtaChunks(ctx, dataID, io.TeeReader(up.Data, sum)); err != nil {
		return nil, errors.Join(err, e.deleteOtaChunks(ctx, dataID, d.Size))
	}
	d.Checksum = sum.String()
	var bad error
	switch {
	case d.Size == 0:
		bad = errOtaDataEmpty
	case up.Checksum != "" && up.Checksum != d.Checksum:
		bad = errOtaWrongFile
	}
	if bad != nil {
		return nil, errors.Join(bad, e.deleteOtaChunks(ctx, dataID, d.Size))
	}
	if err := e.claimOtaData(ctx, r, dataID, d); err != nil {
		return nil, errors.Join(err, e.deleteOtaChunks(ctx, dataID, d.Size))
	}
	info, err := e.finishOtaData(ctx, r, dataID, d)
	if errors.Is(err, ErrNotFound) { // the package was deleted meanwhile: so are its bytes
		return nil, errors.Join(err, e.deleteOtaData(ctx, id))
	}
	return info, err
}

// finishOtaData copies the description of stored bytes into the package info.
// It is idempotent: an upload interrupted after claimOtaData is finished by the
// next upload attempt of the package. It writes over the version it reads, so
// an info update at the same time is kept and a package deleted meanwhile is
// not brought back (ErrNotFound).
func (e *Engine) finishOtaData(ctx context.Context, r *otaRecord, dataID uuid.UUID, d *otaData) (*OtaPackageInfo, error) {
	size := d.Size
	done, err := e.updateOta(ctx, r.TenantID.ID, r.ID.ID, func(r *otaRecord) error {
		r.DataID, r.HasData, r.DataSize = dataID, true, &size
		r.FileName, r.ContentType = &d.FileName, &d.ContentType
		r.ChecksumAlgorithm, r.Checksum = &d.ChecksumAlgorithm, &d.Checksum
		return nil
	})
	if err != nil {
		return nil, err
	}
	return done.info(), nil
}

// GetOtaPackageInfo returns a package of p's tenant (tenant admins and customer
// users); another tenant's is not found.
func (e *Engine) GetOtaPackageInfo(ctx context.Context, p *Principal, id uuid.UUID) (*OtaPackageInfo, error) {
	if err := requireRole(p, TenantAdmin, CustomerUser); err != nil {
		return nil, err
	}
	r, err := e.loadOta(ctx, p.TenantID, id)
	if err != nil {
		return nil, err
	}
	return r.info(), nil
}

// GetOtaPackage returns a package of p's tenant with its bytes, for
// ThingsBoard's GET /api/otaPackage/{id} (tenant admins only): the bytes are
// nil for a URL package or one without data yet.
func (e *Engine) GetOtaPackage(ctx context.Context, p *Principal, id uuid.UUID) (*OtaPackageInfo, *OtaDownload, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, nil, err
	}
	r, err := e.loadOta(ctx, p.TenantID, id)
	if err != nil {
		return nil, nil, err
	}
	if r.hasURL() || !r.hasBytes() {
		return r.info(), nil, nil
	}
	d, err := e.otaDownload(r)
	return r.info(), d, err
}

// ListOtaPackages returns a page of the packages of p's tenant (tenant admins and
// customer users). With a profile id and a type, only those of that profile and
// type that have data (what may be assigned).
func (e *Engine) ListOtaPackages(ctx context.Context, p *Principal, pl PageLink, profileID uuid.UUID, typ string) (PageData[*OtaPackageInfo], error) {
	if err := requireRole(p, TenantAdmin, CustomerUser); err != nil {
		return PageData[*OtaPackageInfo]{}, err
	}
	all, err := listRecords[otaRecord](ctx, e, kindOtaPackage, p.TenantID)
	if err != nil {
		return PageData[*OtaPackageInfo]{}, err
	}
	infos := make([]*OtaPackageInfo, 0, len(all))
	for _, r := range all {
		if typ != "" && (r.Type != typ || idOf(r.DeviceProfileID) != profileID || !r.HasData) {
			continue
		}
		infos = append(infos, r.info())
	}
	return makePage(infos, pl, otaPages)
}

// otaPages sorts by the columns of ThingsBoard's ota_package; an absent value
// is NULL there, and sorts as PostgreSQL sorts NULL (nullKey).
var otaPages = pageSpec[*OtaPackageInfo]{
	text: func(o *OtaPackageInfo) string { return o.Title },
	keys: map[string]func(*OtaPackageInfo) sortKey{
		"id":                func(o *OtaPackageInfo) sortKey { return idKey(o.ID.ID) }, // ThingsBoard's default sort
		"createdTime":       func(o *OtaPackageInfo) sortKey { return numKey(o.CreatedTime) },
		"title":             func(o *OtaPackageInfo) sortKey { return strKey(o.Title) },
		"version":           func(o *OtaPackageInfo) sortKey { return strKey(o.Version) },
		"type":              func(o *OtaPackageInfo) sortKey { return strKey(o.Type) },
		"tag":               func(o *OtaPackageInfo) sortKey { return optStrKey(o.Tag) },
		"url":               func(o *OtaPackageInfo) sortKey { return optStrKey(o.URL) },
		"fileName":          func(o *OtaPackageInfo) sortKey { return optStrKey(o.FileName) },
		"contentType":       func(o *OtaPackageInfo) sortKey { return optStrKey(o.ContentType) },
		"checksumAlgorithm": func(o *OtaPackageInfo) sortKey { return optStrKey(o.ChecksumAlgorithm) },
		"checksum":          func(o *OtaPackageInfo) sortKey { return optStrKey(o.Checksum) },
		"dataSize": func(o *OtaPackageInfo) sortKey {
			if o.DataSize == nil {
				return nullKey
			}
			return numKey(*o.DataSize)
		},
	},
}

// optStrKey is the sort key of an optional text: nullKey when absent.
func optStrKey(s *string) sortKey {
	if s == nil {
		return nullKey
	}
	return strKey(*s)
}

// DeleteOtaPackage deletes a package of p's tenant with its bytes (tenant admins
// only). A package still assigned to a device or a profile is refused (400), as
// ThingsBoard's foreign keys refuse it. The bytes go before the info, so a failed
// delete can be retried, and once more after it: an upload that claimed the
// bytes in between finished over the info before it went (an upload finishing
// after it finds the package gone and removes its bytes itself).
//
// Here there is no foreign key, and a device or profile saved while the
// deletion looks at them could still be given the package: its save checked
// the package before the deletion began and writes after the deletion listed.
// So, as DeleteDeviceProfile, the deletion first marks the package (over the
// version it read, so an upload or info update at the same time keeps the mark
// and brings nothing back), then lists the devices and profiles. A save
// refuses a marked package (checkOtaAssignment), and after its write reads the
// package again and takes the write back if it is marked or gone
// (checkDeviceOtaKept, checkProfileOtaKept). Either that second read comes
// before the mark, and then the save's write came before the listing, which
// sees it and refuses the deletion; or it comes after and sees the mark (or
// no package): no device or profile is left with a deleted package.
//
// A package left marked (a crash between mark and delete) is finished by the
// next deletion of it. One in use keeps the mark until it is staleDeletion
// old (a deletion cannot tell a crashed one from one still under way, see
// deletionMarks); until then only new assignments of it are refused.
func (e *Engine) DeleteOtaPackage(ctx context.Context, p *Principal, id uuid.UUID) error {
	if err := requireRole(p, TenantAdmin); err != nil {
		return err
	}
	deletion := newDeletionID()
	r, err := e.markOtaDeleting(ctx, p.TenantID, id, deletion, true)
	if err != nil {
		return err
	}
	err = e.checkOtaUnused(ctx, r)
	if err == nil {
		err = markHeld[otaRecord](ctx, e, kindOtaPackage, id, deletion)
	}
	if err != nil {
		// Not deleted after all: it may be assigned again.
		if _, uerr := e.markOtaDeleting(ctx, p.TenantID, id, deletion, false); uerr != nil && !errors.Is(uerr, ErrNotFound) {
			return errors.Join(err, uerr)
		}
		return err
	}
	if err := e.deleteOtaData(ctx, id); err != nil {
		return err
	}
	if err := e.deleteRecord(ctx, kindOtaPackage, id); err != nil {
		return notFound(err)
	}
	return e.deleteOtaData(ctx, id)
}

// removeOtaPackage deletes a package and its bytes unchecked, as
// DeleteOtaPackage does once its checks passed; a package already gone is no
// error.
func (e *Engine) removeOtaPackage(ctx context.Context, id uuid.UUID) error {
	if err := e.deleteOtaData(ctx, id); err != nil {
		return err
	}
	if err := e.deleteRecord(ctx, kindOtaPackage, id); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	return e.deleteOtaData(ctx, id)
}

// markOtaDeleting sets or takes back the mark of a deletion of a package of
// tenant, over its latest version, and returns the package as written.
func (e *Engine) markOtaDeleting(ctx context.Context, tenant, id uuid.UUID, deletion string, deleting bool) (*otaRecord, error) {
	return e.updateOta(ctx, tenant, id, func(r *otaRecord) error {
		r.setMark(deletion, deleting, e.now())
		return nil
	})
}

// removeOtaPackages deletes every package of a tenant with its bytes (tenant
// deletion: its devices and profiles are gone first, so nothing refers to them).
func (e *Engine) removeOtaPackages(ctx context.Context, tenant uuid.UUID) error {
	pkgs, err := e.store.List(ctx, kindOtaPackage, tenant)
	if err != nil {
		return fmt.Errorf("cannot list the OTA packages of %s: %w", tenant, err)
	}
	for _, r := range pkgs {
		if err := e.removeOtaPackage(ctx, r.ID); err != nil {
			return err
		}
	}
	return nil
}

// removeProfileOtaPackages deletes the packages of tenant that name profile,
// with their bytes, after the profile was deleted: ThingsBoard's
// fk_device_profile_ota_package ... ON DELETE CASCADE. They need no deletion
// mark (see DeleteOtaPackage): only the profile and its devices may be given
// a package of the profile (checkOtaAssignment), the profile is gone and had
// no devices (DeleteDeviceProfile's own mark-then-check), and a new package of
// it is refused or taken back (SaveOtaPackageInfo).
func (e *Engine) removeProfileOtaPackages(ctx context.Context, tenant, profile uuid.UUID) error {
	pkgs, err := listRecords[otaRecord](ctx, e, kindOtaPackage, tenant)
	if err != nil {
		return err
	}
	for _, r := range pkgs {
		if idOf(r.DeviceProfileID) != profile {
			continue
		}
		if err := e.removeOtaPackage(ctx, r.ID.ID); err != nil {
			return fmt.Errorf("cannot delete OTA package %s of deleted device profile %s: %w", r.ID.ID, profile, err)
		}
	}
	return nil
}

// checkOtaUnused fails when a device or profile of the tenant refers to r.
func (e *Engine) checkOtaUnused(ctx context.Context, r *otaRecord) error {
	what := "otaPackage"
	if r.Type == OtaSoftware {
		what = "software"
	}
	devices, err := listRecords[Device](ctx, e, kindDevice, r.TenantID.ID)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(devices, func(d *Device) bool {
		return idOf(d.FirmwareID) == r.ID.ID || idOf(d.SoftwareID) == r.ID.ID
	}) {
		return Errorf(CodeBadRequestParams, "The %s referenced by the devices cannot be deleted!", what)
	}
	profiles, err := listRecords[DeviceProfile](ctx, e, kindProfile, r.TenantID.ID)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(profiles, func(dp *DeviceProfile) bool {
		return idOf(dp.FirmwareID) == r.ID.ID || idOf(dp.SoftwareID) == r.ID.ID
	}) {
		return Errorf(CodeBadRequestParams, "The %s referenced by the device profile cannot be deleted!", what)
	}
	return nil
}

// OtaDownload is the stored bytes of a package, to be read by range.
type OtaDownload struct {
	e      *Engine
	dataID uuid.UUID
	// Size is the number of bytes; FileName and ContentType are those uploaded.
	Size        int64
	FileName    string
	ContentType string
}

// Reader reads bytes [off, off+n) of the package, one stored chunk at a time;
// the range must lie within Size.
func (d *OtaDownload) Reader(ctx context.Context, off, n int64) io.Reader {
	return &otaReader{ctx: ctx, e: d.e, dataID: d.dataID, off: off, end: off + n}
}

func (e *Engine) otaDownload(r *otaRecord) (*OtaDownload, error) {
	if r.hasURL() {
		return nil, errOtaURLDownload
	}
	if !r.hasBytes() {
		return nil, errOtaNoData
	}
	return &OtaDownload{e: e, dataID: r.DataID, Size: *r.DataSize, FileName: strOf(r.FileName), ContentType: strOf(r.ContentType)}, nil
}

// DownloadOtaPackage returns the bytes of a package of p's tenant (tenant admins
// only): 400 for a URL package, 404 when nothing was uploaded.
func (e *Engine) DownloadOtaPackage(ctx context.Context, p *Principal, id uuid.UUID) (*OtaDownload, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	r, err := e.loadOta(ctx, p.TenantID, id)
	if err != nil {
		return nil, err
	}
	return e.otaDownload(r)
}

var (
	errOtaNotAssigned = &Error{Code: CodeItemNotFound, Msg: "No OTA package with data is assigned to the device"}
	errOtaMismatch    = &Error{Code: CodeBadRequestParams, Msg: "Title or version differs from the assigned OTA package"}
)

// DeviceOtaPackage returns the bytes of the package of type typ assigned to the
// device (its own, else its profile's), for the device API (compat §1.10): 404
// when none is assigned or it is a URL package, 400 when title or version differ.
// The device is read again from storage: dev may come from the token cache, which
// another node's assignment does not evict.
func (e *Engine) DeviceOtaPackage(ctx context.Context, dev *Device, typ, title, version string) (*OtaDownload, error) {
	d, err := e.loadDevice(ctx, dev.UUID())
	if err != nil {
		return nil, notFound(err)
	}
	id, err := e.effectiveOta(ctx, d, typ)
	if err != nil {
		return nil, err
	}
	if id == uuid.Nil {
		return nil, errOtaNotAssigned
	}
	r, err := e.loadOta(ctx, d.TenantID(), id)
	if errors.Is(err, ErrNotFound) {
		return nil, errOtaNotAssigned
	}
	if err != nil {
		return nil, err
	}
	if r.hasURL() || !r.hasBytes() {
		return nil, errOtaNotAssigned
	}
	if r.Title != title || r.Version != version {
		return nil, errOtaMismatch
	}
	return e.otaDownload(r)
}
