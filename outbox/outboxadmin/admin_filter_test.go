package outboxadmin_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
)

// Filter.Error, Filter.Kinds and Filter.Index on the consumer fixture (see
// newConsumerFixture for its events and last errors).

func TestAdminListErrorAndKinds(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	ctx := t.Context()
	failed := []outbox.Status{outbox.StatusFailed}
	for _, tc := range []struct {
		name   string
		filter outboxadmin.Filter
		want   []string
	}{
		// Without a consumer: the outbox row's last_error, any case, anywhere.
		{"error, case and substring", outboxadmin.Filter{Error: "MAPPER_parsing"}, []string{"S3"}},
		{"error ?", outboxadmin.Filter{Error: "HTTP 4??"}, []string{"S1", "S2", "U1", "U2"}},
		{"error * and status", outboxadmin.Filter{Error: "webhook: http 4*", Statuses: failed}, []string{"S1", "U2"}},
		{"error %_ are literal", outboxadmin.Filter{Error: "HTTP_4%"}, nil},
		{"error, no match", outboxadmin.Filter{Error: "schema_version"}, nil},
		// With a consumer: its delivery row's last_error, or the outbox
		// row's when the event has none.
		{"search, its row", outboxadmin.Filter{Consumer: "search", Error: "http 503"}, []string{"S2"}},
		{"search, shared row", outboxadmin.Filter{Consumer: "search", Error: "HTTP 400"}, []string{"U1"}},
		{"search, not the outbox row of a split event", outboxadmin.Filter{Consumer: "search", Error: "422"}, nil},
		{"webhook, its rows", outboxadmin.Filter{Consumer: "webhook", Error: "422"}, []string{"S1", "S2"}},
		{"webhook, its row is done", outboxadmin.Filter{Consumer: "webhook", Error: "mapper"}, nil},
		{"webhook, shared rows", outboxadmin.Filter{Consumer: "webhook", Error: "HTTP 4?0"}, []string{"U1", "U2"}},
		// Kinds: any of them; "" aggregate type matches any.
		{"kinds", outboxadmin.Filter{Kinds: []outboxadmin.Kind{{EventType: "entity.customer.*"}}}, []string{"S1", "S2", "S3", "U1", "P1", "D1"}},
		{"kinds, two", outboxadmin.Filter{Kinds: []outboxadmin.Kind{{EventType: "role.granted"}, {EventType: "entity.customer.created"}}},
			[]string{"U2", "P1", "D1"}},
		{"kinds, aggregate type", outboxadmin.Filter{Kinds: []outboxadmin.Kind{{EventType: "role.*", AggregateType: "AA_*"}}}, []string{"U2", "P2"}},
		{"kinds, aggregate type mismatch", outboxadmin.Filter{Kinds: []outboxadmin.Kind{{EventType: "role.*", AggregateType: "DDM_*"}}}, nil},
		{"kinds, empty: nothing", outboxadmin.Filter{Kinds: []outboxadmin.Kind{}}, nil},
		{"kinds and event type", outboxadmin.Filter{Kinds: []outboxadmin.Kind{{EventType: "entity.*"}}, EventType: "*.created"}, []string{"P1", "D1"}},
		{"kinds, consumer", outboxadmin.Filter{Consumer: "webhook", Kinds: []outboxadmin.Kind{{EventType: "entity.*"}}}, []string{"S1", "S2", "U1", "P1"}},
		{"kinds, consumer and error", outboxadmin.Filter{Consumer: "webhook", Kinds: []outboxadmin.Kind{{EventType: "entity.*"}}, Error: "HTTP 4"},
			[]string{"S1", "S2", "U1"}},
	} {
		evs, err := f.admin.List(ctx, f.db.Pool, tc.filter)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := f.names(listedIDs(evs)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if !(outboxadmin.Filter{Error: "x"}).Narrows() || !(outboxadmin.Filter{Kinds: []outboxadmin.Kind{}}).Narrows() || !(outboxadmin.Filter{Index: "x"}).Narrows() {
		t.Error("Error, Kinds and Index narrow a selection")
	}
}

func TestAdminListIndex(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	ctx := t.Context()
	admin := f.admin.WithIndexes([]outboxadmin.Index{
		{Name: "customers", Consumers: []string{"search"}, Kinds: []outboxadmin.Kind{{EventType: "entity.customer.*", AggregateType: "DDM_ENTITY"}}},
		{Name: "roles", Consumers: []string{"search", "webhook"}, Kinds: []outboxadmin.Kind{{EventType: "role.*"}}},
		{Name: "empty", Consumers: []string{"search"}},
		{Name: "odd", Consumers: []string{"search"}, Problem: `projection p: event_types pattern "a[bc]" uses [ ]`},
	})
	for _, tc := range []struct {
		name   string
		filter outboxadmin.Filter
		want   []string
	}{
		// One consumer writes customers: what search owes of its kinds.
		{"customers", outboxadmin.Filter{Index: "customers"}, []string{"S2", "S3", "U1", "P1"}},
		{"customers, failed, error", outboxadmin.Filter{Index: "customers", Statuses: []outbox.Status{"failed"}, Error: "mapper"}, []string{"S3"}},
		// Two write roles: the events as a whole.
		{"roles", outboxadmin.Filter{Index: "roles"}, []string{"U2", "P2"}},
		{"roles for webhook", outboxadmin.Filter{Index: "roles", Consumer: "webhook", Statuses: []outbox.Status{"failed"}}, []string{"U2"}},
	} {
		evs, err := admin.List(ctx, f.db.Pool, tc.filter)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := f.names(listedIDs(evs)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		filter outboxadmin.Filter
		want   string
	}{
		{outboxadmin.Filter{Index: "orders"}, `unknown index "orders"; the indexes of the search consumers are customers, roles, empty, odd`},
		{outboxadmin.Filter{Index: "customers", Consumer: "webhook"}, `index "customers": consumer webhook does not write it (search does)`},
		{outboxadmin.Filter{Index: "empty"}, `index "empty": no projection writes it`},
		{outboxadmin.Filter{Index: "odd"}, `uses [ ]`},
	} {
		_, err := admin.List(ctx, f.db.Pool, tc.filter)
		var ie *outboxadmin.UnknownIndexError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an *UnknownIndexError with %q", tc.filter, err, tc.want)
		}
		if _, err := admin.Retry(ctx, f.db.Pool, tc.filter, outboxadmin.ChangeOptions{By: "op"}); !errors.As(err, &ie) {
			t.Errorf("retry %+v: %v, want an *UnknownIndexError", tc.filter, err)
		}
	}
	if _, err := f.admin.List(ctx, f.db.Pool, outboxadmin.Filter{Index: "customers"}); err == nil ||
		!strings.Contains(err.Error(), "no search consumer writes an index") {
		t.Errorf("index without WithIndexes: %v", err)
	}
}

func TestAdminRetryByError(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	opts := outboxadmin.ChangeOptions{By: "op"}

	// Without a consumer: the failed events and the events with a failed
	// delivery row whose outbox last_error matches.
	f := newConsumerFixture(t)
	ch, err := f.admin.Retry(ctx, f.db.Pool, outboxadmin.Filter{Error: "webhook: HTTP 4??"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.names(changedIDs(ch.Events)); !slices.Equal(got, []string{"S1", "S2", "U2"}) {
		t.Fatalf("retry by error: %v", got)
	}
	for name, want := range map[string]string{"S1": "pending", "S2": "pending", "U2": "pending", "S3": "failed", "U1": "failed"} {
		if got := f.event(t, name); got.status != want {
			t.Errorf("%s: %s, want %s", name, got.status, want)
		}
	}
	if got := f.deliveries(t, "S2"); got["webhook"] != "pending/0" || got["search"] != "pending/2" {
		t.Errorf("S2 rows: %v", got)
	}

	// For one consumer: its failed rows whose own last_error matches.
	f = newConsumerFixture(t)
	ch, err = f.admin.Retry(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "search", Error: "mapper_parsing_exception"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.names(changedIDs(ch.Events)); !slices.Equal(got, []string{"S3"}) {
		t.Fatalf("retry for search by error: %v", got)
	}
	if got := f.deliveries(t, "S3"); got["search"] != "pending/0" || got["webhook"] != "done/0" {
		t.Errorf("S3 rows: %v", got)
	}
	if got := f.event(t, "U1"); got.status != "failed" {
		t.Errorf("U1: %s, want failed", got.status)
	}
	// The aa_job row records the filter.
	var params string
	if err := f.db.Pool.QueryRow(ctx, `SELECT params::text FROM aa_job WHERE id = $1`, ch.JobID).Scan(&params); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(params, `"error": "mapper_parsing_exception"`) {
		t.Errorf("aa_job params: %s", params)
	}
}

// MatchError and Kind.Matches are the Go side of Filter.Error and
// Filter.Kinds (the console's blocked aggregates); they agree with the SQL.
func TestMatchErrorAndKind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"", "anything", true},
		{"mapper_parsing", "search: engine answered 400 MAPPER_PARSING_EXCEPTION: x", true},
		{"HTTP 4??", "crm-hook: HTTP 422 Unprocessable Entity", true},
		{"HTTP 4??", "crm-hook: HTTP 42", false},
		{"no * within", "POST https://x: no answer within 10s", true},
		{"a*b*c", "xxaYYbZZc", true},
		{"a*b*c", "xxaYYcZZb", false},
		{"webhook:*", "search: x", false},
		{"x", "", false},
	} {
		if got := outboxadmin.MatchError(tc.pattern, tc.s); got != tc.want {
			t.Errorf("MatchError(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
	for _, tc := range []struct {
		k            outboxadmin.Kind
		etype, atype string
		want         bool
	}{
		{outboxadmin.Kind{EventType: "entity.customer.*"}, "entity.customer.updated", "ANY", true},
		{outboxadmin.Kind{EventType: "entity.customer.*", AggregateType: "DDM_ENTITY"}, "entity.customer.updated", "AA_ROLE", false},
		{outboxadmin.Kind{EventType: "role.?ranted"}, "role.granted", "AA_ROLE", true},
		{outboxadmin.Kind{EventType: "role.*"}, "entity.role", "AA_ROLE", false},
	} {
		if got := tc.k.Matches(tc.etype, tc.atype); got != tc.want {
			t.Errorf("%+v.Matches(%q, %q) = %v, want %v", tc.k, tc.etype, tc.atype, got, tc.want)
		}
	}
}
