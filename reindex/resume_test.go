package reindex

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
)

// A run stopped while a chunk is queued but its writes are not sent yet
// must not record that chunk as replayed: the resumed run starts after the
// recorded LastID, so every document of a chunk counted too early would be
// missing from the new index.
//
// Deterministic, no timing: the write of the first chunk is held until the
// second chunk is queued, then let go; once the first chunk has settled the
// run is stopped before the writes of the second chunk are sent (they fail
// on the cancelled context). The live index is empty during that run (the
// replay writes every chunk) and filled before the resumed run, which must
// pass the completeness check and hold every document.
func TestResumeAfterStopBetweenChunks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(1500)
	b.dispatchAll()
	def1 := b.def(nil)
	live, err := mapping.Ensure(b.ctx, b.eng, def1) // empty for now
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config(b.def(emailAsText))
	cfg.Concurrency = 2

	r1, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(b.ctx)
	defer stop()
	var (
		mu            sync.Mutex
		first, second int64
		release       = make(chan struct{})
	)
	r1.hooks.beforeBulk = func(last int64) {
		mu.Lock()
		hold := last == first
		mu.Unlock()
		if hold {
			select {
			case <-release:
			case <-b.ctx.Done():
			}
		}
	}
	r1.hooks.beforeDispatch = func(last int64) {
		mu.Lock()
		switch {
		case first == 0:
			first = last
			mu.Unlock()
			return
		case second == 0:
			second = last
			mu.Unlock()
		default:
			mu.Unlock()
			return
		}
		close(release)
		testenv.Eventually(t, time.Minute, func() bool { return r1.snapshot().LastID >= first }, "the first chunk (up to id %d) settles", first)
		stop() // as a SIGINT would: the job stays running, to be resumed
	}
	if _, err := r1.Run(runCtx); !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped run: %v, want context.Canceled", err)
	}
	if second == 0 {
		t.Fatal("the replay never queued a second chunk (too few events for two chunks?)")
	}
	j, _, err := Running(b.ctx, b.db.Pool, b.alias)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped: chunks up to %d and %d queued, recorded last_id %d", first, second, j.Progress.LastID)
	if j.Progress.LastID >= second {
		t.Errorf("recorded last_id %d passes the chunk up to %d, whose writes were never sent", j.Progress.LastID, second)
	}

	// The live index catches up (standing in for the search consumer).
	lr, err := New(b.config(def1))
	if err != nil {
		t.Fatal(err)
	}
	lr.target = live.Index
	if err := lr.replay(b.ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() bool {
		_, age, err := Running(b.ctx, b.db.Pool, b.alias)
		return err == nil && age > cfg.StaleAfter
	}, "the heartbeat of the stopped run goes stale")

	r2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r2.Run(b.ctx)
	if err != nil {
		t.Fatalf("resumed run: %v", err)
	}
	if !r2.job.Resumed || res.NewIndex != j.Params.Target {
		t.Fatalf("resumed run: resumed %v, new index %s, want %s", r2.job.Resumed, res.NewIndex, j.Params.Target)
	}
	b.checkTruth(b.alias)
}
