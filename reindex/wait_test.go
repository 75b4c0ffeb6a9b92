package reindex

import (
	"testing"
	"time"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
)

// A write block on the new index (as an operator or the disk watermark
// sets) makes the reindex wait, as the relay does, with the reason in its
// progress; once the block is lifted it goes on and finishes complete.
func TestReindexWaitsOutAWriteBlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(800)
	b.dispatchAll()
	def1 := b.def(nil)
	live, err := mapping.Ensure(b.ctx, b.eng, def1) // empty: the replay writes everything
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(b.config(b.def(emailAsText)))
	if err != nil {
		t.Fatal(err)
	}
	r.w.maxWait = time.Second // probe often: the test waits for the end
	blocked := make(chan string, 1)
	set := false
	r.hooks.beforeDispatch = func(int64) { // in the replay's goroutine
		if set {
			return
		}
		set = true
		if err := r.adm.PutSettings(b.ctx, r.target, map[string]any{"blocks.write": true}); err != nil {
			t.Errorf("set the write block: %v", err)
		}
		blocked <- r.target
	}
	runErr := make(chan error, 1)
	go func() { _, err := r.Run(b.ctx); runErr <- err }()
	var target string
	select {
	case target = <-blocked:
	case err := <-runErr:
		t.Fatalf("reindex ended before its first replayed chunk: %v", err)
	}
	testenv.Eventually(t, time.Minute, func() bool { return r.snapshot().Waiting != "" }, "the reindex waits for the blocked index")
	t.Logf("waiting: %s", r.snapshot().Waiting)
	if st, _, _ := b.jobState(b.alias); st != "running" {
		t.Fatalf("job state %q while waiting, want running", st)
	}

	// The live index catches up meanwhile (standing in for the consumer).
	lr, err := New(b.config(def1))
	if err != nil {
		t.Fatal(err)
	}
	lr.target = live.Index
	if err := lr.replay(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.adm.PutSettings(b.ctx, target, map[string]any{"blocks.write": false}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-runErr:
		if err != nil {
			t.Fatalf("reindex after the block was lifted: %v", err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the reindex did not finish within 3m of lifting the block")
	}
	if w := r.snapshot().Waiting; w != "" {
		t.Errorf("still waiting after the end: %s", w)
	}
	b.checkTruth(b.alias)
}
