package loadtest

import (
	"fmt"
	"strconv"
	"strings"
)

// Profile is a payload shape of the fleet simulator. Every body is one of the
// ThingsBoard telemetry forms: a key-value object (the server sets the timestamp) or,
// for ProfileBatch, an array of {"ts","values"} rows.
type Profile string

// The profiles.
const (
	// ProfileSingle is one double: {"temperature":21.3}.
	ProfileSingle Profile = "single"
	// ProfileMeter is a smart water meter: {"pulseCounter","leakage","batteryLevel"}.
	ProfileMeter Profile = "meter"
	// ProfileKeys20 is 20 numeric keys, key1 … key20.
	ProfileKeys20 Profile = "keys20"
	// ProfileMixed mixes every value type: double, long, boolean, string, a string
	// holding a number, strings holding JSON objects, and a JSON object.
	ProfileMixed Profile = "mixed"
	// ProfileBatch is an array of rows rows at unique increasing timestamps, one
	// value each: a gateway or a device uploading its buffer.
	ProfileBatch Profile = "batch"
)

// Profiles lists every profile, in the order the help text gives them.
var Profiles = []Profile{ProfileSingle, ProfileMeter, ProfileKeys20, ProfileMixed, ProfileBatch}

// ParseProfile returns the profile named s.
func ParseProfile(s string) (Profile, error) {
	for _, p := range Profiles {
		if string(p) == s {
			return p, nil
		}
	}
	names := make([]string, len(Profiles))
	for i, p := range Profiles {
		names[i] = string(p)
	}
	return "", fmt.Errorf("unknown profile %q: want one of %s", s, strings.Join(names, ", "))
}

// Timestamped reports whether the body carries its own timestamps (Append uses ts).
func (p Profile) Timestamped() bool { return p == ProfileBatch }

// Append appends the body of a device's request number n to dst and returns it with
// the number of data points it holds. Values vary with n; counters grow with it. ts
// is the first timestamp (ms) of a timestamped profile, which uses ts … ts+rows-1;
// rows matters only for ProfileBatch (at least 1).
func (p Profile) Append(dst []byte, n uint64, ts int64, rows int) ([]byte, int) {
	switch p {
	case ProfileMeter:
		dst = append(dst, `{"pulseCounter":`...)
		dst = strconv.AppendUint(dst, 1000+n*7, 10)
		dst = append(dst, `,"leakage":`...)
		dst = strconv.AppendBool(dst, n%97 == 96)
		dst = append(dst, `,"batteryLevel":`...)
		dst = strconv.AppendUint(dst, 100-(n/100)%100, 10)
		return append(dst, '}'), 3
	case ProfileKeys20:
		dst = append(dst, '{')
		for k := range 20 {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `"key`...)
			dst = strconv.AppendInt(dst, int64(k+1), 10)
			dst = append(dst, `":`...)
			if k%2 == 0 {
				dst = appendDecimal(dst, n+uint64(k))
			} else {
				dst = strconv.AppendUint(dst, n*uint64(k), 10)
			}
		}
		return append(dst, '}'), 20
	case ProfileMixed:
		dst = append(dst, `{"temperature":`...)
		dst = appendDecimal(dst, n)
		dst = append(dst, `,"humidity":`...)
		dst = strconv.AppendUint(dst, 30+n%40, 10)
		dst = append(dst, `,"active":`...)
		dst = strconv.AppendBool(dst, n%2 == 0)
		dst = append(dst, `,"status":"ok","counter":"`...)
		dst = strconv.AppendUint(dst, n, 10)
		dst = append(dst, `","config":"{\"mode\":\"eco\",\"setpoint\":`...)
		dst = appendDecimal(dst, n/10)
		dst = append(dst, `}","location":"{\"lat\":52.37,\"lon\":4.89}","meta":{"fw":"1.4.2","rssi":-`...)
		dst = strconv.AppendUint(dst, 40+n%50, 10)
		return append(dst, `}}`...), 8
	case ProfileBatch:
		rows = max(rows, 1)
		dst = append(dst, '[')
		for i := range rows {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"ts":`...)
			dst = strconv.AppendInt(dst, ts+int64(i), 10)
			dst = append(dst, `,"values":{"temperature":`...)
			dst = appendDecimal(dst, n*uint64(rows)+uint64(i))
			dst = append(dst, `}}`...)
		}
		return append(dst, ']'), rows
	default: // ProfileSingle
		dst = append(dst, `{"temperature":`...)
		dst = appendDecimal(dst, n)
		return append(dst, '}'), 1
	}
}

// appendDecimal appends a plausible temperature that varies with n: 15.0 … 34.9.
func appendDecimal(dst []byte, n uint64) []byte {
	dst = strconv.AppendUint(dst, 15+n%20, 10)
	dst = append(dst, '.')
	return strconv.AppendUint(dst, (n/20)%10, 10)
}

// AppendAttributes appends the client attributes a device posts now and then:
// firmware version, serial number (from device), uptime (from n) and a flag.
func AppendAttributes(dst []byte, device int, n uint64) []byte {
	dst = append(dst, `{"firmwareVersion":"1.4.2","serialNumber":"SN-`...)
	dst = strconv.AppendInt(dst, int64(device), 10)
	dst = append(dst, `","uptime":`...)
	dst = strconv.AppendUint(dst, n*60, 10)
	dst = append(dst, `,"online":true}`...)
	return dst
}
