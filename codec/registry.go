package codec

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-iot/sluice/kv"
)

// Decoder turns request bodies of one media type into entries. Both methods
// follow ParseTelemetry's contract: they append to dst, entries may alias
// body, and on error dst is returned as it was. strict is the REST API's
// handling of a value-less entry (an error instead of dropping it).
type Decoder interface {
	Telemetry(dst []kv.Entry, body []byte, now int64, lim Limits, strict bool) ([]kv.Entry, error)
	Attributes(dst []kv.Entry, body []byte, lim Limits, strict bool) ([]kv.Entry, error)
}

// UnsupportedTypeError says that no decoder is registered for a request's
// Content-Type; the HTTP layer answers it with 415.
type UnsupportedTypeError struct{ MediaType string }

func (e *UnsupportedTypeError) Error() string {
	return fmt.Sprintf("Content type '%s' is not supported; supported types: %s",
		e.MediaType, strings.Join(MediaTypes(), ", "))
}

// registry maps a lower-case media type to its decoder; "" is a missing
// Content-Type. It is written only by init functions, so reads need no lock.
var registry = map[string]Decoder{}

// Register makes d the decoder of each media type (matched case-insensitively,
// without parameters). It must be called from an init function; a media type
// registered twice panics.
func Register(d Decoder, mediaTypes ...string) {
	for _, mt := range mediaTypes {
		mt = strings.ToLower(mt)
		if _, dup := registry[mt]; dup {
			panic("codec: media type registered twice: " + mt)
		}
		registry[mt] = d
	}
}

func init() {
	// JSON is the default: no Content-Type, and what generic clients send
	// (curl -d says application/x-www-form-urlencoded) all mean JSON.
	Register(JSON, "", "application/json", "text/plain", "application/x-www-form-urlencoded")
	Register(Protobuf, "application/x-protobuf", "application/protobuf")
}

// MediaTypes lists the registered media types, sorted.
func MediaTypes() []string {
	var out []string
	for mt := range registry {
		if mt != "" {
			out = append(out, mt)
		}
	}
	slices.Sort(out)
	return out
}

// DecoderFor returns the decoder of a Content-Type header value: its media
// type without parameters, case-insensitive. An unknown one is an
// *UnsupportedTypeError. It does not allocate for a known type.
func DecoderFor(contentType []byte) (Decoder, error) {
	mt := contentType
	if i := bytes.IndexByte(mt, ';'); i >= 0 {
		mt = mt[:i]
	}
	mt = bytes.TrimSpace(mt)
	var lower [64]byte
	if len(mt) <= len(lower) && hasUpper(mt) {
		for i, c := range mt {
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			lower[i] = c
		}
		mt = lower[:len(mt)]
	}
	if d, ok := registry[string(mt)]; ok {
		return d, nil
	}
	return nil, &UnsupportedTypeError{MediaType: string(mt)}
}

func hasUpper(b []byte) bool {
	for _, c := range b {
		if c >= 'A' && c <= 'Z' {
			return true
		}
	}
	return false
}

// JSON is the decoder of JSON bodies: the ParseTelemetry and ParseAttributes
// family.
var JSON Decoder = jsonDecoder{}

type jsonDecoder struct{}

func (jsonDecoder) Telemetry(dst []kv.Entry, body []byte, now int64, lim Limits, strict bool) ([]kv.Entry, error) {
	return parse(dst, body, now, lim, strict, true)
}

func (jsonDecoder) Attributes(dst []kv.Entry, body []byte, lim Limits, strict bool) ([]kv.Entry, error) {
	return parse(dst, body, 0, lim, strict, false)
}
