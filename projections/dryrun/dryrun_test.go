package dryrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/routing"
)

// runner is the customer example's search consumer, with a webhook
// consumer routed beside it.
func runner(t *testing.T) *Runner {
	t.Helper()
	set := projections.NewSet()
	if err := customer.Register(set); err != nil {
		t.Fatal(err)
	}
	defs, err := mapping.Load("")
	if err != nil {
		t.Fatal(err)
	}
	return &Runner{Projections: set, Defs: defs, Consumers: []Consumer{{Name: "search", Indexes: []string{"customers"}}},
		Routing: &routing.Table{Consumers: []string{"search", "hook"}, Routes: []routing.Route{{Consumer: "search", EventTypes: []string{"entity.customer.*"}}, {Consumer: "hook"}}}}
}

func event(etype string, schemaVersion int, payload string) *outbox.Event {
	id := uuid.MustParse("11111111-1111-1111-1111-111111111111")
	return &outbox.Event{ID: 7, EventType: etype, AggregateType: customer.AggregateType, AggregateID: &id, SchemaVersion: schemaVersion, Payload: json.RawMessage(payload)}
}

func one(t *testing.T, rep *Report) ConsumerReport {
	t.Helper()
	if len(rep.Consumers) != 1 {
		t.Fatalf("%d consumer reports, want 1: %+v", len(rep.Consumers), rep)
	}
	return rep.Consumers[0]
}

// A schema_version 1 payload is upcast (name → display_name) and merged
// onto the current document given; a version 2 one needs no upcaster.
func TestUpcastProjectAndMerge(t *testing.T) {
	t.Parallel()
	r := runner(t)
	r.Current = Given(map[string]any{"display_name": "Old", "status": "active", "tenant_key": "public", "deleted": false}, 4, "file cur.json")
	rep := r.Run(context.Background(), event("entity.customer.updated", 1, `{"tenant_key": "public", "version": 5, "after": {"name": "New"}}`))
	if strings.Join(rep.Routed, ",") != "search,hook" {
		t.Errorf("routed %v", rep.Routed)
	}
	c := one(t, rep)
	if c.Error != nil || c.Upcast == nil || c.Upcast.From != 1 || c.Upcast.To != 2 {
		t.Fatalf("upcast %+v error %+v", c.Upcast, c.Error)
	}
	if after := c.Upcast.Payload["after"].(map[string]any); after["display_name"] != "New" || after["name"] != nil {
		t.Errorf("upcast payload %v", c.Upcast.Payload)
	}
	if !c.Result.Partial || c.Result.Op != projections.OpIndex || c.Result.Version != 5 || !c.Result.NeedsState {
		t.Errorf("result %+v", c.Result)
	}
	w := c.Write
	if w.Op != "index" || w.Step != "applied" || w.Version != 5 || w.Doc["display_name"] != "New" || w.Doc["status"] != "active" || w.Doc["deleted"] != false {
		t.Errorf("write %+v", w)
	}

	rep = r.Run(context.Background(), event("entity.customer.updated", 2, `{"tenant_key": "public", "version": 3, "after": {"display_name": "Older"}}`))
	c = one(t, rep)
	if c.Upcast.From != 2 || c.Upcast.To != 2 || c.Write.Op != "none" || c.Write.Step != "stale" || !strings.Contains(c.Write.Note, "version 3 is not above the version 4") {
		t.Errorf("a stale version 2 event: upcast %+v write %+v", c.Upcast, c.Write)
	}
}

// A soft delete sets the tombstone on the current document and keeps it.
func TestSoftDelete(t *testing.T) {
	t.Parallel()
	r := runner(t)
	r.Current = Given(map[string]any{"display_name": "Ada", "tenant_key": "public", "deleted": false}, 2, "file cur.json")
	c := one(t, r.Run(context.Background(), event("entity.customer.deleted", 2, `{"tenant_key": "public", "version": 3}`)))
	if c.Result.Op != projections.OpDelete || c.Write.Op != "index" || c.Write.Doc["deleted"] != true || c.Write.Doc["display_name"] != "Ada" {
		t.Fatalf("soft delete: result %+v write %+v", c.Result, c.Write)
	}
	// Without a current document, the note says what the index adds.
	r.Current = nil
	c = one(t, r.Run(context.Background(), event("entity.customer.deleted", 2, `{"tenant_key": "public", "version": 3}`)))
	if c.Write.Doc["deleted"] != true || c.Write.Doc["tenant_key"] != "public" || !strings.Contains(c.Write.Note, "soft delete") {
		t.Fatalf("soft delete without current: %+v", c.Write)
	}
}

// Poison events name the path their reason is about; an event no
// projection takes is skipped; a current document that cannot be read is
// said, and the fold goes on from none.
func TestPoisonSkippedAndUnreadable(t *testing.T) {
	t.Parallel()
	r := runner(t)
	for _, tc := range []struct {
		schemaVersion   int
		payload         string
		stage, path, in string
	}{
		{2, `{"version": "x", "after": {}}`, "project", "version", `version at "version" is a string`},
		{2, `{"version": 1, "after": [1]}`, "project", "after", "after is an array, not an object"},
		{2, `{"version": 1, "code": {"a": 1}}`, "project", "code", "field code (from code)"},
		{3, `{"version": 1}`, "upcast", "@schema_version", "schema_version 3 is newer"},
		{0, `{"version": 1}`, "upcast", "@schema_version", "below 1"},
	} {
		c := one(t, r.Run(context.Background(), event("entity.customer.updated", tc.schemaVersion, tc.payload)))
		if c.Error == nil || c.Error.Stage != tc.stage || c.Error.Path != tc.path || !strings.Contains(c.Error.Message, tc.in) || c.Write != nil {
			t.Errorf("%s: %+v", tc.payload, c.Error)
		}
	}
	rep := r.Run(context.Background(), &outbox.Event{EventType: "entity.customer.updated", AggregateType: "OTHER", SchemaVersion: 1, Payload: json.RawMessage(`{}`)})
	if c := one(t, rep); !strings.Contains(c.Skipped, "no projection of [customers] takes entity.customer.updated of OTHER") {
		t.Errorf("skipped: %+v", c)
	}
	if rep := r.Run(context.Background(), event("role.granted", 1, `{}`)); len(rep.Consumers) != 0 || strings.Join(rep.Routed, ",") != "hook" {
		t.Errorf("routed to the hook only: %+v", rep)
	}
	r.Current = func(context.Context, string, string) (*CurrentDoc, error) {
		return nil, errors.New("connection refused")
	}
	c := one(t, r.Run(context.Background(), event("entity.customer.updated", 2, `{"version": 1, "after": {"display_name": "A"}}`)))
	if c.Current == nil || !strings.Contains(c.Current.Error, "connection refused") || c.Write == nil || c.Write.Doc["display_name"] != "A" {
		t.Errorf("unreadable current: %+v %+v", c.Current, c.Write)
	}
	var buf bytes.Buffer
	(&Report{Event: Event{EventType: "x.y"}, Routed: []string{"search"}, Consumers: []ConsumerReport{c}}).WriteText(&buf)
	if !strings.Contains(buf.String(), "current: UNREADABLE") {
		t.Errorf("text:\n%s", buf.String())
	}
}

func TestParseCurrent(t *testing.T) {
	t.Parallel()
	doc, v, err := ParseCurrent([]byte(`{"_index": "customers_v1", "_id": "a", "_version": 9, "found": true, "_source": {"code": "C-1"}}`))
	if err != nil || v != 9 || doc["code"] != "C-1" {
		t.Errorf("GET answer: %v %d %v", doc, v, err)
	}
	doc, v, err = ParseCurrent([]byte(`{"code": "C-2"}`))
	if err != nil || v != 0 || doc["code"] != "C-2" {
		t.Errorf("bare: %v %d %v", doc, v, err)
	}
	if doc, _, err := ParseCurrent([]byte(`{"_id": "a", "found": false}`)); err != nil || doc != nil {
		t.Errorf("not found: %v %v", doc, err)
	}
	if _, _, err := ParseCurrent([]byte(`[1]`)); err == nil {
		t.Error("an array parsed")
	}
}
