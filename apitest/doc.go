// Package apitest holds black-box tests: they start a real Sluice node (in-process
// on a random port, or the built binary) and drive it over HTTP only.
package apitest
