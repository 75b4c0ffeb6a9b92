package nats

import "testing"

func TestCovers(t *testing.T) {
	for _, tc := range []struct {
		filter, shape string
		want          bool
	}{
		{"outbox.>", "outbox.*.>", true},
		{"outbox.>", "outbox.*.*", true},
		{"outbox.*.>", "outbox.*.>", true},
		{"outbox.*.*", "outbox.*.>", false}, // the event type may have more tokens
		{"outbox.*.*.*", "outbox.*.*.*", true},
		{"outbox.A.>", "outbox.*.>", false},
		{"outbox.A.>", "outbox.A.>", true},
		{"outbox", "outbox.*", false},
		{">", "outbox.*.>", true},
		{"outbox.>", "outbox", false}, // '>' needs a token
		{"other.>", "outbox.*.>", false},
	} {
		if got := covers(tc.filter, tc.shape); got != tc.want {
			t.Errorf("covers(%q, %q) = %v, want %v", tc.filter, tc.shape, got, tc.want)
		}
	}
	if miss := uncovered([]string{"outbox.A.>", "outbox.B.>"}, []string{"outbox.*.>"}); len(miss) != 1 {
		t.Errorf("uncovered: %v", miss)
	}
}

// Reasons and logs name the server without its credentials.
func TestShownURLHidesCredentials(t *testing.T) {
	if got := shownURL("nats://app:s3cr3t@nats.internal:4222"); got != "nats://nats.internal:4222" {
		t.Errorf("shownURL = %q", got)
	}
}
