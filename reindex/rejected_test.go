package reindex

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/sink/search"
)

// A live event that the new index of a running reindex rejects (its new
// mapping refuses a value the live mapping takes) is the reindex's failure,
// not the event's: the event is delivered to the live index, and the job
// ends failed with the engine's reason (in the job row that `searchsync
// reindex status` shows, and from Run); the alias stays where it was.
func TestTargetRejectionFailsTheJobNotTheEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(300)
	b.dispatchAll()
	def1 := b.def(nil)
	v1 := b.buildLive(def1)
	def2 := b.def(func(props map[string]any) {
		emailAsText(props)
		props["loyalty_tier"] = map[string]any{"type": "integer"} // new: refuses "gold"
	})

	// Hold the reindex in its replay: dual writes are on by then.
	r, err := New(b.config(def2))
	if err != nil {
		t.Fatal(err)
	}
	replaying, release := make(chan struct{}), make(chan struct{})
	first := true
	r.hooks.beforeDispatch = func(int64) {
		if !first {
			return
		}
		first = false
		close(replaying)
		select {
		case <-release:
		case <-b.ctx.Done():
		}
	}
	runErr := make(chan error, 1)
	go func() { _, err := r.Run(b.ctx); runErr <- err }()
	select {
	case <-replaying:
	case err := <-runErr:
		t.Fatalf("reindex ended before its replay: %v", err)
	}

	// The live consumer, writing the alias and the reindex target.
	cons, err := search.New(search.Config{Engine: b.eng, Projections: b.set,
		Defs: mapping.Defs{b.alias: def1}, DualWrites: NewTargets(b.db.Pool)})
	if err != nil {
		t.Fatal(err)
	}
	ev := b.gen.Create()
	var p map[string]any
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		t.Fatal(err)
	}
	p["after"].(map[string]any)["loyalty_tier"] = "gold"
	ev.Payload, _ = json.Marshal(p)
	ev.ID, ev.SchemaVersion = 1<<40, 1
	// An engine too slow to answer (a loaded machine) makes the delivery
	// Unavailable; the relay would pause and deliver it again, and so does
	// the test, for up to 2 minutes.
	out := cons.Deliver(b.ctx, []*outbox.Event{&ev})
	for began := time.Now(); out[0].Kind == delivery.Unavailable && time.Since(began) < 2*time.Minute; {
		t.Logf("live event unavailable (%s); delivering it again", out[0].Reason)
		out = cons.Deliver(b.ctx, []*outbox.Event{&ev})
	}
	if out[0].Kind != delivery.OK {
		t.Errorf("live event: %v %s; want OK (the live index took it, only the reindex target refused it)", out[0].Kind, out[0].Reason)
	}
	if docs, err := b.eng.MGet(b.ctx, v1, []string{ev.AggregateID.String()}); err != nil || len(docs) != 1 {
		t.Errorf("live index %s lacks the event's document: %v, %v", v1, docs, err)
	}

	close(release)
	select {
	case err = <-runErr:
	case <-time.After(2 * time.Minute):
		t.Fatal("the reindex did not end within 2m after the rejection")
	}
	if err == nil || !strings.Contains(err.Error(), "mapper_parsing_exception") {
		t.Errorf("reindex run: %v; want a failure with the engine's reason (mapper_parsing_exception)", err)
	}
	jobs, err := List(b.ctx, b.db.Pool, Filter{Alias: b.alias, Limit: 1})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("jobs: %v, %v", jobs, err)
	}
	if j := jobs[0]; j.State != "failed" || !strings.Contains(j.Error, "mapper_parsing_exception") || !strings.Contains(j.Error, ev.AggregateID.String()) {
		t.Errorf("job row: state %q, error %q; want failed with the engine's reason and the document", j.State, j.Error)
	}
	if tg, _ := b.eng.AliasTargets(b.ctx, b.alias); len(tg) != 1 || tg[0] != v1 {
		t.Errorf("alias after the failed reindex points to %v, want %s", tg, v1)
	}
	testenv.Eventually(t, time.Minute, func() bool {
		info, err := b.eng.GetIndex(context.Background(), mapping.PhysicalName(b.alias, 2))
		return err == nil && info == nil
	}, "the target of the failed reindex is deleted")
}
