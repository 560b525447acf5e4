package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// Assignment of OTA packages (compat §5, Part 1). A device's package of a type is
// its own firmwareId (softwareId), else its profile's. When that changes the
// device gets, at once rather than after ThingsBoard's queue delay:
//   - telemetry target_fw_title, target_fw_version, target_fw_tag (if any),
//     target_fw_ts, and fw_state QUEUED then INITIATED (1 ms later, so the
//     history keeps both);
//   - shared attributes fw_title, fw_version, fw_tag, and fw_size,
//     fw_checksum_algorithm, fw_checksum (a data package) or fw_url (a URL
//     package), through SaveAttributes, so open long polls on every node see them.
//     Keys the new package lacks are deleted afterwards: a poll answers one
//     message, and it should be the new package rather than a deletion.
//
// Un-assigning deletes every fw_* shared attribute. Software uses sw_*.

// otaPrefix is the key prefix of a package type.
func otaPrefix(typ string) string {
	if typ == OtaSoftware {
		return "sw"
	}
	return "fw"
}

// otaAttributeKeys are every shared attribute of a type (OtaPackageUtil.getAttributeKeys).
func otaAttributeKeys(typ string) []string {
	p := otaPrefix(typ)
	return []string{p + "_title", p + "_version", p + "_ts", p + "_state", p + "_size",
		p + "_checksum", p + "_checksum_algorithm", p + "_url", p + "_tag"}
}

// otaIDOf is the package id of a type set on a device or profile, or uuid.Nil.
func otaIDOf(typ string, firmware, software *EntityID) uuid.UUID {
	if typ == OtaSoftware {
		return idOf(software)
	}
	return idOf(firmware)
}

// effectiveOta is the package of type typ of the device: its own, else its
// profile's; uuid.Nil when none.
func (e *Engine) effectiveOta(ctx context.Context, d *Device, typ string) (uuid.UUID, error) {
	if id := otaIDOf(typ, d.FirmwareID, d.SoftwareID); id != uuid.Nil {
		return id, nil
	}
	dp, err := getRecord[DeviceProfile](ctx, e, kindProfile, d.DeviceProfileID.ID)
	if errors.Is(err, storage.ErrNotFound) {
		return uuid.Nil, nil
	}
	if err != nil {
		return uuid.Nil, err
	}
	return otaIDOf(typ, dp.FirmwareID, dp.SoftwareID), nil
}

// checkOtaAssignment validates the firmwareId and softwareId of a device or
// profile of tenant about to be saved (AbstractHasOtaPackageValidator): each must
// be a package of the tenant, of its type, with data, and of profileID when the
// package names a profile. A null id means none. oldFirmware and oldSoftware
// are those of the version saved over (nil for a new one): a package whose
// deletion is under way counts as missing unless it is one of them, for
// keeping a package is no new assignment (the deletion's listing sees the
// device or profile either way) and a mark left by a crash should not block
// every save of the devices that have the package.
func (e *Engine) checkOtaAssignment(ctx context.Context, tenant, profileID uuid.UUID, firmware, software **EntityID, oldFirmware, oldSoftware *EntityID) error {
	for _, a := range []struct {
		typ string
		id  **EntityID
	}{{OtaFirmware, firmware}, {OtaSoftware, software}} {
		if *a.id == nil || isNull((*a.id).ID) {
			*a.id = nil
			continue
		}
		name := otaPrefixName(a.typ)
		r, err := getRecord[otaRecord](ctx, e, kindOtaPackage, (*a.id).ID)
		if errors.Is(err, storage.ErrNotFound) {
			return errOtaMissing(a.typ)
		}
		switch {
		case err != nil:
			return err
		case r.marked(e.now()) && r.ID.ID != otaIDOf(a.typ, oldFirmware, oldSoftware):
			return errOtaMissing(a.typ) // see DeleteOtaPackage
		case r.TenantID.ID != tenant:
			return Errorf(CodeBadRequestParams, "Can't assign %s from different tenant!", name)
		case r.Type != a.typ:
			return Errorf(CodeBadRequestParams, "Can't assign %s with type: %s", name, r.Type)
		case !r.HasData:
			return Errorf(CodeBadRequestParams, "Can't assign %s with empty data!", name)
		case r.DeviceProfileID != nil && r.DeviceProfileID.ID != profileID:
			return Errorf(CodeBadRequestParams, "Can't assign %s with different deviceProfile!", name)
		}
		*a.id = &r.ID
	}
	return nil
}

// errOtaMissing is the answer to an assignment of a package of type typ that
// does not exist, or whose deletion is under way.
func errOtaMissing(typ string) error {
	return Errorf(CodeBadRequestParams, "Can't assign non-existent %s!", otaPrefixName(typ))
}

// lostOta runs after a device or profile was written with packages firmware
// and software over a version with oldFirmware and oldSoftware (nil: a new
// one). It returns the type of a package newly assigned whose deletion has
// begun meanwhile, or which is gone (see DeleteOtaPackage); "" if none.
func (e *Engine) lostOta(ctx context.Context, firmware, software, oldFirmware, oldSoftware *EntityID) (string, error) {
	for _, typ := range []string{OtaFirmware, OtaSoftware} {
		id := otaIDOf(typ, firmware, software)
		if id == uuid.Nil || id == otaIDOf(typ, oldFirmware, oldSoftware) {
			continue
		}
		r, err := getRecord[otaRecord](ctx, e, kindOtaPackage, id)
		if errors.Is(err, storage.ErrNotFound) || (err == nil && r.marked(e.now())) {
			return typ, nil
		}
		if err != nil {
			return "", err
		}
	}
	return "", nil
}

func otaPrefixName(typ string) string {
	if typ == OtaSoftware {
		return "software"
	}
	return "firmware"
}

// otaDeviceSaved updates the OTA state of a device after it was saved: old is the
// previous version, nil for a new device. A package is sent when the effective
// one changed (own id or profile), and removed when there is none any more.
func (e *Engine) otaDeviceSaved(ctx context.Context, old, d *Device) error {
	for _, typ := range []string{OtaFirmware, OtaSoftware} {
		if old != nil && old.DeviceProfileID.ID == d.DeviceProfileID.ID &&
			otaIDOf(typ, old.FirmwareID, old.SoftwareID) == otaIDOf(typ, d.FirmwareID, d.SoftwareID) {
			continue // the common save: nothing OTA changed, no profile to read
		}
		now, err := e.effectiveOta(ctx, d, typ)
		if err != nil {
			return err
		}
		before := uuid.Nil
		if old != nil {
			if before, err = e.effectiveOta(ctx, old, typ); err != nil {
				return err
			}
		}
		if now == before {
			continue
		}
		if err := e.applyOta(ctx, d, typ, now); err != nil {
			return err
		}
	}
	return nil
}

// applyOta brings the OTA state of type typ of device d to package id, or
// removes it when id is uuid.Nil, as DefaultOtaPackageStateService.process
// does: the device and its profile are read again, and nothing is written
// unless id is still the device's package (a save that changed it meanwhile
// writes its own). A save landing between that check and the writes would
// find the state right and leave it to these stale ones, so the device is
// read once more afterwards and the package it has by then written again.
// A deleted device is left alone.
func (e *Engine) applyOta(ctx context.Context, d *Device, typ string, id uuid.UUID) error {
	cur, err := e.currentOta(ctx, d.UUID(), typ)
	if err != nil || cur != id {
		return ignoreGone(err)
	}
	for range maxReplaceTries {
		if err := e.writeOta(ctx, d, typ, id); err != nil {
			return err
		}
		if cur, err = e.currentOta(ctx, d.UUID(), typ); err != nil || cur == id {
			return ignoreGone(err)
		}
		id = cur
	}
	return errChangedMeanwhile
}

// currentOta is the stored device's package of type typ (effectiveOta);
// storage.ErrNotFound when the device is gone.
func (e *Engine) currentOta(ctx context.Context, device uuid.UUID, typ string) (uuid.UUID, error) {
	d, err := e.loadDevice(ctx, device)
	if err != nil {
		return uuid.Nil, err
	}
	return e.effectiveOta(ctx, d, typ)
}

// ignoreGone is err, but nil for storage.ErrNotFound.
func ignoreGone(err error) error {
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	return err
}

// writeOta writes the state of package id of type typ to the device, or
// removes it when id is uuid.Nil. A package deleted meanwhile counts as none.
func (e *Engine) writeOta(ctx context.Context, d *Device, typ string, id uuid.UUID) error {
	if id == uuid.Nil {
		return e.DeleteAttributes(ctx, d.UUID(), storage.SharedScope, otaAttributeKeys(typ))
	}
	r, err := getRecord[otaRecord](ctx, e, kindOtaPackage, id)
	if errors.Is(err, storage.ErrNotFound) || (err == nil && !r.HasData) {
		return e.DeleteAttributes(ctx, d.UUID(), storage.SharedScope, otaAttributeKeys(typ))
	}
	if err != nil {
		return err
	}
	return e.sendOta(ctx, d, r)
}

// sendOta writes the target telemetry and the shared attributes of package r.
func (e *Engine) sendOta(ctx context.Context, d *Device, r *otaRecord) error {
	p := otaPrefix(r.Type)
	ts := e.now().UnixMilli()
	str := func(key, v string) kv.Entry { return kv.Entry{Ts: ts, Key: key, Value: kv.StringValue(v)} }

	telemetry := []kv.Entry{
		str("target_"+p+"_title", r.Title),
		str("target_"+p+"_version", r.Version),
		{Ts: ts, Key: "target_" + p + "_ts", Value: kv.LongValue(ts)},
		str(p+"_state", "QUEUED"),
		{Ts: ts + 1, Key: p + "_state", Value: kv.StringValue("INITIATED")},
	}
	if r.Tag != nil {
		telemetry = append(telemetry, str("target_"+p+"_tag", *r.Tag))
	}
	rows := make([]storage.Row, len(telemetry))
	for i, t := range telemetry {
		rows[i] = storage.Row{TenantID: d.TenantID(), EntityID: d.UUID(), Entry: t}
	}
	if err := e.store.Write(ctx, rows); err != nil {
		return fmt.Errorf("cannot write the OTA state of device %s: %w", d.ID.ID, err)
	}

	attrs := []kv.Entry{str(p+"_title", r.Title), str(p+"_version", r.Version)}
	var stale []string
	if r.Tag != nil {
		attrs = append(attrs, str(p+"_tag", *r.Tag))
	} else {
		stale = append(stale, p+"_tag")
	}
	if r.hasURL() {
		attrs = append(attrs, str(p+"_url", *r.URL))
		stale = append(stale, p+"_size", p+"_checksum_algorithm", p+"_checksum")
	} else {
		attrs = append(attrs,
			kv.Entry{Key: p + "_size", Value: kv.LongValue(*r.DataSize)},
			str(p+"_checksum_algorithm", *r.ChecksumAlgorithm),
			str(p+"_checksum", *r.Checksum))
		stale = append(stale, p+"_url")
	}
	if err := e.SaveAttributes(ctx, d.UUID(), storage.SharedScope, attrs); err != nil {
		return err
	}
	return e.DeleteAttributes(ctx, d.UUID(), storage.SharedScope, stale)
}

// checkProfileOta validates the packages of a profile about to be saved and
// returns its stored version (nil for a new profile) for otaProfileSaved.
func (e *Engine) checkProfileOta(ctx context.Context, dp *DeviceProfile) (*DeviceProfile, error) {
	// Only new profiles come here (updateProfile checks its own): no package
	// is kept, so none marked for deletion may be given.
	if err := e.checkOtaAssignment(ctx, dp.TenantID.ID, dp.ID.ID, &dp.FirmwareID, &dp.SoftwareID, nil, nil); err != nil {
		return nil, err
	}
	prev, err := getRecord[DeviceProfile](ctx, e, kindProfile, dp.ID.ID)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, nil
	}
	return prev, err
}
