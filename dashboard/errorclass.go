package dashboard

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/sink/nats"
	"github.com/searchsync/searchsync/sink/webhook"
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
// write. Each pattern is defined beside the code that writes the reason
// (indexer.Classify, projections, sink/webhook, sink/nats, delivery for
// the consumers' timeouts), whose tests hold it to the text; this list only
// names what the operator does about it. A last_error of an event whose
// consumers diverged joins "<consumer>: <reason>" parts, so an event may be
// in several classes.
var ErrorClasses = []ErrorClass{
	{"fix-mapping", "Fix the index mapping or the document: the engine rejected it (400, e.g. mapper_parsing_exception)", indexer.RejectedPattern},
	{"fix-payload", "Fix the producer's payload: the projection cannot use it (no version, document id, field types, schema_version)", projections.PoisonPattern},
	{"fix-schema-version", "Register an upcaster or upgrade searchsync: the schema_version is unknown or has no upcaster", projections.SchemaVersionPattern},
	{"fix-webhook-request", "Fix the webhook request or the endpoint: it answered HTTP 4xx", webhook.RequestPattern},
	{"fix-nats-message", "Fix the message or the stream: NATS refused it (max_payload, stream rules)", nats.MessagePattern},
	{"check-engine", "Check the engine's health, then retry: it failed the write (5xx)", indexer.FailedPattern},
	{"check-timeouts", "Check the slow service or raise its timeout, then retry: no answer in time", delivery.NoAnswerPattern},
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
