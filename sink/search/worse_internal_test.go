package search

import (
	"testing"

	"github.com/searchsync/searchsync/sink"
)

// The outcome of one document written to the live alias and to a reindex
// target: delivered only when both took it; Unavailable above Retry, Poison
// above everything.
func TestWorse(t *testing.T) {
	t.Parallel()
	k := func(kind sink.Kind) sink.Outcome { return sink.Outcome{Kind: kind, Reason: kind.String()} }
	for _, c := range []struct{ a, b, want sink.Kind }{
		{sink.OK, sink.OK, sink.OK},
		{sink.Stale, sink.OK, sink.OK},
		{sink.OK, sink.Stale, sink.Stale},
		{sink.OK, sink.Unavailable, sink.Unavailable},
		{sink.Unavailable, sink.OK, sink.Unavailable},
		{sink.Retry, sink.Unavailable, sink.Unavailable},
		{sink.Unavailable, sink.Retry, sink.Unavailable},
		{sink.Unavailable, sink.Poison, sink.Poison},
		{sink.Poison, sink.Unavailable, sink.Poison},
		{sink.NotAttempted, sink.Unavailable, sink.Unavailable},
		{sink.Retry, sink.NotAttempted, sink.Retry},
	} {
		if got := worse(k(c.a), k(c.b)); got.Kind != c.want {
			t.Errorf("worse(%s, %s) = %s, want %s", c.a, c.b, got.Kind, c.want)
		}
	}
}
