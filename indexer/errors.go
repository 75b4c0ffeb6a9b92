package indexer

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// The errors of the engine seam, and the predicates that decide what
// happens next. Callers outside indexer ask the predicates, never an HTTP
// status, an engine error type or the text of an error:
//
//   - IsTemporary: retrying the same request later can succeed (no answer,
//     429, 5xx).
//   - IsForbidden: the engine refused the credentials (401) or the
//     privilege (403).
//   - IsIndexNotFound: the index or alias is not there.
//   - IsAlreadyExists: the index to create exists already.
//   - IsTransport: no answer from the engine at all.
//   - IsUnsupported: Amazon OpenSearch Serverless does not serve the API
//     (serverless.go).
//
// The same rules decide on answers that are not Go errors: Classify on a
// bulk item, BulkResult.IndexNotFound, TaskInfo.Temporary on the failures
// of a server-side copy.

// The engine's error types the predicates read.
const (
	typeIndexNotFound = "index_not_found_exception"
	// typeAlreadyExists is part of resource_already_exists_exception (and
	// index_already_exists_exception of older engines).
	typeAlreadyExists = "already_exists"
)

// EngineError is an error answer of the engine.
type EngineError struct {
	Op     string // what was attempted, e.g. "create index customers_v1"
	Status int
	Type   string
	Reason string
	// Hint, for 401 and 403, names the setting to check or the privilege
	// to grant (connect.go, access.go).
	Hint string
}

func (e *EngineError) Error() string {
	typ := e.Type
	if typ == "" {
		// An answer without an error object (a proxy's or the security
		// plugin's plain "Unauthorized"): the status's text.
		typ = http.StatusText(e.Status)
	}
	s := e.Op + ": " + strconv.Itoa(e.Status) + " " + typ
	if e.Reason != "" && e.Reason != typ {
		s += ": " + e.Reason
	}
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

// Temporary reports whether retrying the same request later can succeed:
// 429 (rejected execution, retryable cluster blocks) and 5xx answers.
func (e *EngineError) Temporary() bool { return temporaryStatus(e.Status) }

// TransportError is a failure to get an answer from the engine at all
// (connection refused, reset, timeout, unreadable response). It is always
// worth retrying.
type TransportError struct {
	Op  string // what was attempted
	Err error
}

func (e *TransportError) Error() string { return e.Op + ": engine unreachable: " + e.Err.Error() }
func (e *TransportError) Unwrap() error { return e.Err }

// AsEngineError returns the *EngineError in err's chain, if any.
func AsEngineError(err error) (*EngineError, bool) {
	var ee *EngineError
	ok := errors.As(err, &ee)
	return ee, ok
}

// IsTransport reports whether err is a transport failure (no answer from
// the engine), as opposed to an answer of the engine.
func IsTransport(err error) bool {
	var te *TransportError
	return errors.As(err, &te)
}

// IsTemporary reports whether err is worth retrying: a transport failure or
// an engine answer with status 429 or 5xx. A cancelled context is not.
func IsTemporary(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if ee, ok := AsEngineError(err); ok {
		return ee.Temporary()
	}
	return IsTransport(err)
}

// IsForbidden reports whether the engine refused the request's credentials
// (401) or its privileges (403): an operator grants them; retrying does not
// help, and a check that needs them may be skipped.
func IsForbidden(err error) bool {
	ee, ok := AsEngineError(err)
	return ok && forbiddenStatus(ee.Status)
}

// IsIndexNotFound reports whether the engine answered that the index or
// alias of the request does not exist.
func IsIndexNotFound(err error) bool {
	ee, ok := AsEngineError(err)
	return ok && ee.Type == typeIndexNotFound
}

// IsAlreadyExists reports whether the engine refused to create an index
// because it exists already (another process created it a moment before).
func IsAlreadyExists(err error) bool {
	ee, ok := AsEngineError(err)
	return ok && ee.Status == http.StatusBadRequest && strings.Contains(ee.Type, typeAlreadyExists)
}

// IndexNotFound reports whether the engine refused the item because its
// index or alias does not exist.
func (r BulkResult) IndexNotFound() bool { return r.ErrType == typeIndexNotFound }

// Answer is what the engine said about the item, as the reasons of Classify
// quote it: "engine answered <status> <type>: <reason>".
func (r BulkResult) Answer() string {
	return "engine answered " + strconv.Itoa(r.Status) + " " + r.ErrType + ": " + r.ErrReason
}

// Temporary reports whether everything that went wrong in the finished
// task t is temporary, so that running it again can succeed: its error, or
// every failed document (each the engine's JSON with its status), is 429
// or 5xx.
func (t *TaskInfo) Temporary() bool {
	if t.Error != nil {
		return t.Error.Temporary()
	}
	if len(t.Failures) == 0 {
		return false
	}
	for _, f := range t.Failures {
		var doc struct {
			Status int `json:"status"`
		}
		if json.Unmarshal(f, &doc) != nil || !temporaryStatus(doc.Status) {
			return false
		}
	}
	return true
}

// temporaryStatus: 429 (rejected execution, retryable cluster blocks) and
// 5xx.
func temporaryStatus(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// forbiddenStatus: 401 and 403.
func forbiddenStatus(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden
}

// Conflict reports a guarded write (BulkOp.Guarded) refused because the
// document changed since it was read, or was made meanwhile (Create).
func (r BulkResult) Conflict() bool { return r.Status == http.StatusConflict }
