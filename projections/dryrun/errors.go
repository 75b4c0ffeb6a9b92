package dryrun

import (
	"errors"
	"regexp"

	"github.com/searchsync/searchsync/projections"
)

// poisonError turns an error of Upcast, Project or the index check into an
// Error with the path its reason names.
func poisonError(stage string, err error) *Error {
	out := &Error{Stage: stage, Reason: err.Error(), Message: err.Error()}
	if pe, ok := errors.AsType[*projections.PoisonError](err); ok {
		out.Projection, out.Reason = pe.Projection, pe.Reason
	}
	out.Path = errorPath(out.Reason)
	return out
}

// pathPatterns find the path in the reasons of package projections
// (TestErrorPaths holds them to its messages); the first group is the path.
var pathPatterns = []*regexp.Regexp{
	regexp.MustCompile(`^field \S+ \(from (\S+)\):`),               // a declared field's value
	regexp.MustCompile(`^(?:no document id|document id) at (\S+)`), // the id
	regexp.MustCompile(`^tenant at (\S+) is`),                      // the tenant key
	regexp.MustCompile(`version at "([^"]*)"`),                     // the external version
	regexp.MustCompile(`^(\S+) is [^,]+, not an object$`),          // after of copy_all_of_after
	regexp.MustCompile(`^(payload) is not a JSON object`),
}

// schemaVersionRE: a reason about the schema_version itself (Set.Upcast's).
var schemaVersionRE = regexp.MustCompile(`^(?:schema_version \d+ is|no upcaster for )`)

// upcasterRE: an upcaster failed; its own error may name a path.
var upcasterRE = regexp.MustCompile(`^upcaster \S+ \d+→\d+: (.*)$`)

// errorPath is the payload path (or @column) a poison reason names, "" when
// it names none.
func errorPath(reason string) string {
	if schemaVersionRE.MatchString(reason) {
		return "@schema_version"
	}
	if m := upcasterRE.FindStringSubmatch(reason); m != nil {
		if p := errorPath(m[1]); p != "" {
			return p
		}
		return "@schema_version"
	}
	for _, re := range pathPatterns {
		if m := re.FindStringSubmatch(reason); m != nil {
			return m[1]
		}
	}
	return ""
}
