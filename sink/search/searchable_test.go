package search_test

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/secret"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/internal/tlsconf"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/sink/search"
)

func noRefresh(d *mapping.Def) { d.Settings["refresh_interval"] = "-1" }

// The consumer tells Searchable the commit times of what it wrote; an index
// that does not refresh keeps them waiting (polls change nothing), and the
// first refresh after a poll makes them searchable: one observation per
// event, from its commit to the poll that saw the refresh, never before the
// refresh. Stale events are not counted.
func TestSearchableWaitsForARefresh(t *testing.T) {
	b := setup(t, noRefresh)
	var mu sync.Mutex
	var seen []float64
	s, err := search.NewSearchable(search.SearchableConfig{Engine: b.eng, Observe: func(index string, sec float64) {
		mu.Lock()
		defer mu.Unlock()
		if index != b.alias {
			t.Errorf("observed index %q, want %s", index, b.alias)
		}
		seen = append(seen, sec)
	}})
	if err != nil {
		t.Fatal(err)
	}
	observed := func() []float64 {
		mu.Lock()
		defer mu.Unlock()
		return append([]float64(nil), seen...)
	}
	cons := b.consumer(func(c *search.Config) { c.Searchable = s })
	a, z := uuid.New(), uuid.New()
	evs := b.produce(customer.Created(ch(a, 1, map[string]any{"status": "draft"})), customer.Created(ch(z, 1, map[string]any{"status": "draft"})))
	if out := cons.Deliver(b.ctx, evs); out[0].Kind != delivery.OK || out[1].Kind != delivery.OK {
		t.Fatalf("deliver: %+v", out)
	}
	stale := b.produce(customer.Updated(ch(a, 1, map[string]any{"status": "blocked"})))
	if out := cons.Deliver(b.ctx, stale); out[0].Kind != delivery.Stale {
		t.Fatalf("deliver the stale event: %+v", out)
	}
	if n := s.Waiting(b.alias); n != 2 {
		t.Fatalf("%d events wait for a refresh, want 2 (the stale one wrote nothing)", n)
	}
	for range 3 {
		s.Poll(b.ctx)
	}
	if got := observed(); len(got) != 0 || s.Waiting(b.alias) != 2 {
		t.Fatalf("without a refresh: observed %v, %d waiting; want nothing observed", got, s.Waiting(b.alias))
	}
	if n, err := b.eng.Count(b.ctx, b.alias, nil); err != nil || n != 0 {
		t.Fatalf("the documents are searchable before a refresh (%d, %v): the test cannot tell", n, err)
	}
	refreshed := time.Now()
	if err := b.eng.Refresh(b.ctx, b.alias); err != nil {
		t.Fatal(err)
	}
	s.Poll(b.ctx)
	got := observed()
	if len(got) != 2 || s.Waiting(b.alias) != 0 {
		t.Fatalf("after a refresh: observed %v, %d waiting; want both events", got, s.Waiting(b.alias))
	}
	for i, sec := range got {
		if committed := evs[i].CreatedAt; sec < refreshed.Sub(committed).Seconds() {
			t.Errorf("event %d: %.3fs from commit to searchable, before the refresh came (%.3fs after its commit)", i, sec, refreshed.Sub(committed).Seconds())
		}
	}
}

// TestSearchableWithTheLeastPrivilegeRole: with the documented writer role
// of the secured node (which grants indices:monitor/stats) the commit →
// searchable latency is measured; a user that may not read index stats (the
// read-only one) stops the measurement with one WARN that names the
// privilege, instead of being refused four times a second for ever.
func TestSearchableWithTheLeastPrivilegeRole(t *testing.T) {
	sec := testenv.Secure(t)
	b := setupOn(t, indexer.Config{URLs: []string{sec.URL}, TLS: tlsconf.Config{CAFile: sec.CAFile},
		Username: sec.WriterUser, Password: secret.Ref(sec.WriterPassword)}, noRefresh)
	var mu sync.Mutex
	var seen int
	s, err := search.NewSearchable(search.SearchableConfig{Engine: b.eng, Observe: func(string, float64) { mu.Lock(); seen++; mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	cons := b.consumer(func(c *search.Config) { c.Searchable = s })
	if out := cons.Deliver(b.ctx, b.produce(customer.Created(ch(uuid.New(), 1, map[string]any{"status": "draft"})))); out[0].Kind != delivery.OK {
		t.Fatalf("deliver: %+v", out)
	}
	s.Poll(b.ctx) // the counts before the refresh
	if err := b.eng.Refresh(b.ctx, b.alias); err != nil {
		t.Fatal(err)
	}
	s.Poll(b.ctx)
	if mu.Lock(); seen != 1 || s.Disabled() != "" {
		t.Errorf("writer role: %d observed, disabled %q; want the event measured", seen, s.Disabled())
	}
	mu.Unlock()

	// The read-only user: refused.
	reader, err := indexer.New(indexer.Config{URLs: []string{sec.URL}, TLS: tlsconf.Config{CAFile: sec.CAFile},
		Username: sec.ReadOnlyUser, Password: secret.Ref(sec.ReadOnlyPassword)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { indexer.Close(reader) })
	var log testenv.LogBuffer
	rs, err := search.NewSearchable(search.SearchableConfig{Engine: reader, Observe: func(string, float64) {},
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// At start-up (the consumer's access check asks once, after the write
	// and read checks, which this user would fail first).
	if rs.CheckStats(b.ctx, b.alias); rs.Disabled() == "" {
		t.Errorf("read-only user: the start-up check did not stop the measurement")
	}
	// Later polls stay quiet.
	rs.Written(b.alias, []time.Time{time.Now()})
	for range 3 {
		rs.Poll(b.ctx)
	}
	text := log.String()
	if rs.Disabled() == "" || strings.Count(text, "level=WARN") != 1 || !strings.Contains(text, "grant indices:monitor/stats") {
		t.Errorf("read-only user: disabled %q; log:\n%s", rs.Disabled(), text)
	}
	if rs.Written(b.alias, []time.Time{time.Now()}); rs.Waiting(b.alias) != 0 {
		t.Errorf("writes still kept after the measurement stopped")
	}
}
