package dryrun

import (
	"errors"

	"github.com/searchsync/searchsync/projections"
)

// poisonError turns an error of Upcast, Project or the index check into an
// Error with the path it is about (a *projections.PoisonError's Path).
func poisonError(stage string, err error) *Error {
	out := &Error{Stage: stage, Reason: err.Error(), Message: err.Error()}
	if pe, ok := errors.AsType[*projections.PoisonError](err); ok {
		out.Projection, out.Reason, out.Path = pe.Projection, pe.Reason, pe.Path
	}
	return out
}
