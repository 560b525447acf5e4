package engine

import (
	"errors"
	"fmt"

	"github.com/sluice-iot/sluice/storage"
)

// Code is a ThingsBoard error code (ThingsboardErrorCode). Each code implies one
// HTTP status; the mapping lives in the HTTP front end, the engine only picks the code.
type Code int

const (
	CodeGeneral          Code = 2
	CodeAuthentication   Code = 10
	CodeJWTExpired       Code = 11
	CodeCredentialsExp   Code = 15
	CodePermissionDenied Code = 20
	CodeInvalidArguments Code = 30
	CodeBadRequestParams Code = 31
	CodeItemNotFound     Code = 32
	CodeTooManyRequests  Code = 33
	CodeVersionConflict  Code = 35
	CodeEntitiesLimit    Code = 41 // ENTITIES_LIMIT_EXCEEDED: 403, see EntitiesLimitError
	CodeUnavailable      Code = 50 // Sluice: storage or write path cannot take more (503)
)

// Error is an engine error that a client should see: a code and a message.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Errorf builds an *Error.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Common errors with ThingsBoard's texts.
var (
	ErrNotFound         = &Error{Code: CodeItemNotFound, Msg: "Requested item wasn't found!"}
	ErrPermissionDenied = &Error{Code: CodePermissionDenied, Msg: "You don't have permission to perform this operation!"}
	ErrAuthFailed       = &Error{Code: CodeAuthentication, Msg: "Authentication failed"}
	ErrBadCredentials   = &Error{Code: CodeAuthentication, Msg: "Invalid username or password"}
	ErrTokenExpired     = &Error{Code: CodeJWTExpired, Msg: "Token has expired"}
)

// notFound turns storage.ErrNotFound into ErrNotFound and passes other errors on.
// staleVersion is ThingsBoard's optimistic lock (EntityVersionMismatchException):
// a version the client sends must be the stored one, or the save is 409. No
// version (0) saves over whatever is stored.
func staleVersion(what string, given, stored int64) error {
	if given != 0 && given != stored {
		return versionConflict(what)
	}
	return nil
}

// versionConflict is ThingsBoard's EntityVersionMismatchException for what.
func versionConflict(what string) *Error {
	return &Error{Code: CodeVersionConflict, Msg: what + " was already changed by someone else"}
}

func notFound(err error) error {
	if errors.Is(err, storage.ErrNotFound) {
		return ErrNotFound
	}
	return err
}
