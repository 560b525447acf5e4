package storage

import (
	"context"
	"time"
)

// LoginGuard counts failed logins for every node of a deployment (Redis), so
// a lockout holds whichever node a guess reaches. A back end without it leaves
// each node counting the attempts it serves (the embedded default: one node).
type LoginGuard interface {
	// AdmitLogin counts one login attempt against each of keys (a user name,
	// a client address), or refuses it while any of them is locked. An attempt
	// that finds a key's count at its limit locks that key for window, the
	// counting window too. The attempt counts as a failure until
	// LoginSucceeded, so concurrent guesses cannot outrun the limit.
	AdmitLogin(ctx context.Context, now time.Time, keys []string, limits []int, window time.Duration) (bool, error)
	// LoginSucceeded forgets the failures of keys[0] (the user name) and takes
	// back the attempt AdmitLogin counted against the others.
	LoginSucceeded(ctx context.Context, keys []string) error
}

// LoginGuardOf is the LoginGuard of a back end: the back end itself, or, for
// one composed of others (storage/split), the one its LoginGuard method
// names; nil when there is none.
func LoginGuardOf(b any) LoginGuard {
	if g, ok := b.(LoginGuard); ok {
		return g
	}
	if c, ok := b.(interface{ LoginGuard() LoginGuard }); ok {
		return c.LoginGuard()
	}
	return nil
}
