package reindex

import (
	"testing"
	"time"

	"github.com/searchsync/searchsync/indexer"
)

// A second run of a copy counts what the first copied once.
func TestSumCopies(t *testing.T) {
	t.Parallel()
	if s := sumCopies(&indexer.TaskInfo{Created: 10, VersionConflicts: 90}, 90); s.Created != 100 || s.VersionConflicts != 0 {
		t.Errorf("sumCopies: created %d, conflicts %d; want 100 and 0", s.Created, s.VersionConflicts)
	}
}

// The seed looks at its copy task about a quarter of the remaining time
// apart, within bounds: rarely while much is left, often near the end.
func TestPollAfter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		total, done int64
		elapsed     time.Duration
		want        time.Duration
	}{
		{"nothing done yet", 1000, 0, 50 * time.Millisecond, 4 * pollMin},
		{"all done, not completed", 1000, 1000, time.Second, pollMin},
		{"half done after 400ms", 1000, 500, 400 * time.Millisecond, 100 * time.Millisecond},
		{"much left", 1_000_000, 1000, time.Second, pollMax},
		{"nearly done", 1000, 990, time.Second, pollMin},
	} {
		got := pollAfter(&indexer.TaskInfo{Total: c.total, Created: c.done / 2, Updated: c.done - c.done/2}, c.elapsed)
		if got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
