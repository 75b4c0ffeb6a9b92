package nats

import (
	"testing"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/internal/testenv"
)

// The console's error classes select the messages the server refused by
// MessagePattern, and a missing PubAck by delivery.NoAnswerPattern
// (dashboard.ErrorClasses); last_error keeps the text.
func TestReasonPatterns(t *testing.T) {
	t.Parallel()
	c := &Consumer{cfg: Config{Stream: "events"}}
	for _, tc := range []struct {
		name             string
		err              error
		message, noReply bool
	}{
		{"max_payload", natsgo.ErrMaxPayload, true, false},
		{"stream rules", &jetstream.APIError{Code: 400, ErrorCode: 10054, Description: "message size exceeds maximum allowed"}, true, false},
		{"no PubAck", jetstream.ErrAsyncPublishTimeout, false, true},
	} {
		o := c.classify(t.Context(), "app.customer.created", tc.err, nil)
		if got := testenv.MatchesError(MessagePattern, o.Reason); got != tc.message {
			t.Errorf("%s: %q selected by MessagePattern %q: %v, want %v", tc.name, o.Reason, MessagePattern, got, tc.message)
		}
		if got := testenv.MatchesError(delivery.NoAnswerPattern, o.Reason); got != tc.noReply {
			t.Errorf("%s: %q selected by delivery.NoAnswerPattern %q: %v, want %v", tc.name, o.Reason, delivery.NoAnswerPattern, got, tc.noReply)
		}
	}
}
