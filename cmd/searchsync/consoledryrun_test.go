package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/searchsync/searchsync/dashboard"
	"github.com/searchsync/searchsync/dashboard/dashboardtest"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/lag"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
)

// TestConsoleEventPageDryRun: the event page of a failed event shows what
// the search consumer would write, from the dry run `searchsync run` wires
// (dryRunner, the CLI's): the poison error with its path for a poison
// event, the upcast payload and the document for one that projects.
func TestConsoleEventPageDryRun(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	cfg := &config.Config{
		Consumers: []config.Consumer{{Name: "search", Type: "search", Search: &config.Search{Indexes: []string{"customers"}}}},
		Routes:    []config.Route{{Consumer: "search", EventTypes: []string{"entity.customer.*"}}},
	}
	cfg.Indexes.Examples = []string{"customer"}
	ids := map[string]int64{}
	for _, e := range []struct {
		name    string
		version int
		payload string
	}{
		{"poison", 2, `{"tenant_key": "public", "version": 2, "code": {"nested": true}}`},
		{"upcast", 1, `{"tenant_key": "public", "version": 3, "after": {"name": "Grace"}}`},
	} {
		var id int64
		if err := db.Pool.QueryRow(ctx, `INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, schema_version, payload, status, attempts, last_error)
			VALUES ('entity.customer.updated', 'DDM_ENTITY', $1, $2, $3, 'failed', 10, 'search: poison') RETURNING id`, uuid.New(), e.version, e.payload).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[e.name] = id
	}
	dry, err := dryRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	smp := lag.NewSampler(lag.NewReader(db.Pool, db.Schema, config.LagConsumers(cfg.Consumers), cfg.Routing()), lag.SamplerConfig{}, nil)
	events := &dashboard.Events{Admin: outboxadmin.New(db.Schema).WithRouting(cfg.Routing()), DB: db.Pool, DryRun: dry}
	srv := httptest.NewServer(dashboard.Handler(dashboard.Source{Sampler: smp, Instance: "test", Events: events}))
	t.Cleanup(srv.Close)

	detail := func(id int64) dashboard.EventDetail {
		t.Helper()
		resp, err := http.Get(srv.URL + "/api/events/" + strconv.FormatInt(id, 10))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var d dashboard.EventDetail
		if err := json.Unmarshal(b, &d); err != nil || d.Projection == nil || len(d.Projection.Consumers) != 1 {
			t.Fatalf("GET /api/events/%d: %v\n%s", id, err, b)
		}
		return d
	}
	c := detail(ids["poison"]).Projection.Consumers[0]
	if c.Error == nil || c.Error.Path != "code" || c.Error.Stage != "project" || !strings.Contains(c.Error.Message, "field code (from code)") || c.Write != nil {
		t.Fatalf("poison event: %+v", c.Error)
	}
	c = detail(ids["upcast"]).Projection.Consumers[0]
	if c.Error != nil || c.Upcast.From != 1 || c.Upcast.To != 2 || c.Write.Doc["display_name"] != "Grace" {
		t.Fatalf("upcast event: %+v %+v %+v", c.Error, c.Upcast, c.Write)
	}

	bctx := dashboardtest.OpenBrowser(t, srv.URL+"/events/"+strconv.FormatInt(ids["poison"], 10))
	text := func() string {
		ctx, cancel := context.WithTimeout(bctx, 5*time.Second)
		defer cancel()
		s, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#projection")))
		return s
	}
	testenv.Eventually(t, 15*time.Second, func() bool { return strings.Contains(text(), "Poison at code (project)") },
		"the page shows the poison error with its path: %q", text())
	if s := text(); !strings.Contains(s, "field code (from code)") || !strings.Contains(s, "Projection customer") {
		t.Fatalf("poison section: %q", s)
	}
	if _, err := chromedp.Run(bctx, chromedp.Navigate(srv.URL+"/events/"+strconv.FormatInt(ids["upcast"], 10))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, func() bool { return strings.Contains(text(), "upcast from schema_version 1 to 2") },
		"the page shows the upcast: %q", text())
	if s := text(); !strings.Contains(s, `"display_name": "Grace"`) || !strings.Contains(s, "Writes: index customers/") {
		t.Fatalf("upcast section: %q", s)
	}
}
