package engine

import "unicode/utf8"

// maxFieldLen is ThingsBoard's limit on names, titles, types and labels
// (@Length on its entities: 255 characters).
const maxFieldLen = 255

// checkLengths refuses a field longer than maxFieldLen characters with
// ThingsBoard's validation message. Pairs are field name, value.
func checkLengths(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if utf8.RuneCountInString(pairs[i+1]) > maxFieldLen {
			return Errorf(CodeBadRequestParams, "Validation error: %s length must be equal or less than %d", pairs[i], maxFieldLen)
		}
	}
	return nil
}
