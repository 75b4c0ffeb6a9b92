package dashboard

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrorClass is a kind of last_error the relay writes, named after what
// the operator does about it, and the Filter.Error pattern that selects it
// (GET /api/error-classes; the event page's error dropdown sends the
// pattern as error=).
type ErrorClass struct {
	Name    string `json:"name"`
	Label   string `json:"label"`
	Pattern string `json:"pattern"`
}

// ErrorClasses are the classes of the reasons the consumers and the relay
// write (sink/search, indexer.Classify, projections, sink/webhook,
// sink/nats). A last_error of an event whose consumers diverged joins
// "<consumer>: <reason>" parts, so an event may be in several classes.
var ErrorClasses = []ErrorClass{
	// indexer.Classify: a bulk item the engine refused with 400
	// (mapper_parsing_exception, document_parsing_exception,
	// strict_dynamic_mapping_exception, illegal_argument_exception).
	{"fix-mapping", "Fix the index mapping or the document: the engine rejected it (400, e.g. mapper_parsing_exception)", "engine answered 400 *exception"},
	// projections.PoisonError: "projection NAME: event ID (TYPE): REASON".
	{"fix-payload", "Fix the producer's payload: the projection cannot use it (no version, document id, field types, schema_version)", "projection*: event *"},
	// projections.Set.Upcast.
	{"fix-schema-version", "Register an upcaster or upgrade searchsync: the schema_version is unknown or has no upcaster", "schema_version"},
	// sink/webhook: the endpoint answered 4xx (401/403: its credentials).
	{"fix-webhook-request", "Fix the webhook request or the endpoint: it answered HTTP 4xx", "HTTP 4??"},
	// sink/nats: the server refused the message (max_payload, the stream).
	{"fix-nats-message", "Fix the message or the stream: NATS refused it (max_payload, stream rules)", "nats: *message"},
	// indexer.Classify: the engine failed the write until attempts ran out.
	{"check-engine", "Check the engine's health, then retry: it failed the write (5xx)", "engine answered 5??"},
	// sink/webhook and sink/nats: no answer before the timeout.
	{"check-timeouts", "Check the slow service or raise its timeout, then retry: no answer in time", "no * within"},
}

// maxErrorPattern bounds an error pattern.
const maxErrorPattern = 200

// checkError refuses an error pattern that is too long or not text.
func checkError(key, p string) error {
	switch {
	case len(p) > maxErrorPattern:
		return fmt.Errorf("%s: %d bytes, at most %d", key, len(p), maxErrorPattern)
	case !utf8.ValidString(p) || strings.ContainsRune(p, 0):
		return fmt.Errorf("%s %q: not valid UTF-8 text", key, p)
	}
	return nil
}
