package engine

import (
	"crypto/rand"

	"github.com/google/uuid"
)

// ParseID parses an id from a URL or query in its canonical 36-character form; any
// other text is a 400 with ThingsBoard's message.
func ParseID(s string) (uuid.UUID, error) {
	if len(s) != 36 {
		return uuid.Nil, Errorf(CodeBadRequestParams, "Invalid UUID string: %s", s)
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, Errorf(CodeBadRequestParams, "Invalid UUID string: %s", s)
	}
	return id, nil
}

// newID returns a time-ordered id, so storage lists records in creation order.
func newID() uuid.UUID {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.New()
	}
	return id
}

const alphanumeric = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// randomString returns n characters drawn uniformly from [A-Za-z0-9] with
// crypto/rand: access tokens and generated passwords are secrets.
func randomString(n int) string {
	out := make([]byte, 0, n)
	var buf [64]byte
	for len(out) < n {
		rand.Read(buf[:])
		for _, b := range buf {
			// 248 = 4*62: dropping the top bytes keeps every character equally likely.
			if b < 248 && len(out) < n {
				out = append(out, alphanumeric[b%62])
			}
		}
	}
	return string(out)
}
