// Package sluicepb holds the Go types generated from sluice.proto, the
// Protocol Buffers schema of Sluice telemetry and attribute bodies, for Go
// clients and tests. The server does not use them: codec decodes the wire
// format directly (codec/proto.go), without allocating messages.
package sluicepb

// Regenerate with protoc 3.21+ and protoc-gen-go of the version in go.mod.
//go:generate protoc --go_out=. --go_opt=paths=source_relative sluice.proto
