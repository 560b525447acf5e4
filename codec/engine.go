package codec

import (
	"runtime"

	"github.com/bytedance/sonic"
)

// JSONEngine says which implementation sonic, the JSON library of the REST
// request and response structs, runs in this binary: "sonic native (amd64,
// go1.26.8)" when its JIT/SIMD path supports the platform and Go version, else
// "encoding/json fallback (…)". sonic decides at build time by build tags
// (amd64 or arm64, and a Go release it knows, below go1.28 for v1.15) and
// reports the result in sonic.APIKind. The device and telemetry bodies do not
// depend on it: this package's scanner parses them.
func JSONEngine() string {
	platform := " (" + runtime.GOARCH + ", " + runtime.Version() + ")"
	if sonic.APIKind == sonic.UseSonicJSON {
		return "sonic native" + platform
	}
	return "encoding/json fallback" + platform
}
