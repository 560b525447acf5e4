package split

import "github.com/sluice-iot/sluice/storage"

// LoginGuard is the state back end's login guard (Redis counts failed logins
// for every node), nil when it has none (storage.LoginGuardOf).
func (b *Backend) LoginGuard() storage.LoginGuard {
	g, _ := b.Entities.(storage.LoginGuard)
	return g
}
