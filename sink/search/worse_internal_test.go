package search

import (
	"testing"

	"github.com/searchsync/searchsync/delivery"
)

// The outcome of one document written to the live alias and to a reindex
// target: delivered only when both took it; Unavailable above Retry, Poison
// above everything.
func TestWorse(t *testing.T) {
	t.Parallel()
	k := func(kind delivery.Kind) delivery.Outcome { return delivery.Outcome{Kind: kind, Reason: kind.String()} }
	for _, c := range []struct{ a, b, want delivery.Kind }{
		{delivery.OK, delivery.OK, delivery.OK},
		{delivery.Stale, delivery.OK, delivery.OK},
		{delivery.OK, delivery.Stale, delivery.Stale},
		{delivery.OK, delivery.Unavailable, delivery.Unavailable},
		{delivery.Unavailable, delivery.OK, delivery.Unavailable},
		{delivery.Retry, delivery.Unavailable, delivery.Unavailable},
		{delivery.Unavailable, delivery.Retry, delivery.Unavailable},
		{delivery.Unavailable, delivery.Poison, delivery.Poison},
		{delivery.Poison, delivery.Unavailable, delivery.Poison},
		{delivery.NotAttempted, delivery.Unavailable, delivery.Unavailable},
		{delivery.Retry, delivery.NotAttempted, delivery.Retry},
	} {
		if got := worse(k(c.a), k(c.b)); got.Kind != c.want {
			t.Errorf("worse(%s, %s) = %s, want %s", c.a, c.b, got.Kind, c.want)
		}
	}
}
