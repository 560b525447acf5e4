package engine

import (
	"strings"
	"unicode/utf8"
)

// maxFieldLen is ThingsBoard's limit on names, titles, types, labels and
// e-mail addresses (@Length on its entities: 255 characters).
const maxFieldLen = 255

// checkLengths refuses a field longer than maxFieldLen characters with
// ThingsBoard's validation message, and one holding a control character (a NUL
// in a device name breaks every export and log line that shows it; ThingsBoard's
// PostgreSQL refuses it with a 500). Pairs are field name, value.
func checkLengths(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if utf8.RuneCountInString(pairs[i+1]) > maxFieldLen {
			return Errorf(CodeBadRequestParams, "Validation error: %s length must be equal or less than %d", pairs[i], maxFieldLen)
		}
		if strings.ContainsFunc(pairs[i+1], isControl) {
			return Errorf(CodeBadRequestParams, "Validation error: %s must not contain control characters", pairs[i])
		}
	}
	return nil
}

// maxAdditionalInfo bounds the JSON of an entity's additionalInfo. ThingsBoard
// sets no limit on it; this one keeps every stored record, and so every read
// of one (a device record is read on each token cache miss), small, and is
// the 64 KiB of Sluice's other client-supplied JSON bounds.
const maxAdditionalInfo = 64 << 10

// checkAdditionalInfo refuses an additionalInfo over maxAdditionalInfo.
func checkAdditionalInfo(raw []byte) error { return checkJSONSize("additional info", raw) }

// checkJSONSize refuses a client's JSON field over maxAdditionalInfo.
func checkJSONSize(field string, raw []byte) error {
	if len(raw) > maxAdditionalInfo {
		return Errorf(CodeBadRequestParams, "Validation error: %s length must be equal or less than %d bytes", field, maxAdditionalInfo)
	}
	return nil
}

// isControl reports the C0 controls and DEL.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }
