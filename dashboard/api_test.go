package dashboard

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/internal/secret"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/lag"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
	"github.com/searchsync/searchsync/routing"
)

const testToken = "s3cret-operator-token"

// apiServer serves the console over db with actions on (testToken) and,
// when public is set, http.public_url; the log goes to the returned buffer.
func apiServer(t *testing.T, db *testenv.DB, public string) (*httptest.Server, *testenv.LogBuffer) {
	t.Helper()
	smp := newSampler(db)
	if _, err := smp.Sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	consumers := []string{"search", "crm-hook"}
	admin := outboxadmin.New(db.Schema).WithRouting(&routing.Table{Consumers: consumers,
		Routes: []routing.Route{{Consumer: "search"}, {Consumer: "crm-hook"}}})
	log := &testenv.LogBuffer{}
	src := Source{Sampler: smp, Instance: "test", Logger: slog.New(slog.NewTextHandler(log, nil)),
		Events: &Events{Admin: admin, DB: db.Pool, Token: secret.New(testToken)},
		Reindex: &Reindex{Aliases: func() []AliasDrift {
			a := AliasDrift{Alias: "customers", Index: "customers_v1", Drift: DriftNone, EngineHealth: "yellow"}
			a.Judge()
			return []AliasDrift{a}
		}}}
	if public != "" {
		u, err := url.Parse(public)
		if err != nil {
			t.Fatal(err)
		}
		src.PublicURL = u
	}
	srv := httptest.NewServer(Handler(src))
	t.Cleanup(srv.Close)
	return srv, log
}

func do(t *testing.T, method, u string, header map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Every /api path answers JSON, a path that is none of them too.
func TestUnknownAPIPathsAnswerJSON(t *testing.T) {
	t.Parallel()
	srv, _ := apiServer(t, testenv.NewDB(t), "")
	for _, c := range []struct{ method, path string }{{"GET", "/api/nope"}, {"POST", "/api/events/1/explode"}, {"DELETE", "/api/state"}, {"GET", "/api/"}} {
		code, body := do(t, c.method, srv.URL+c.path, nil, "")
		var e Error
		if code != http.StatusNotFound || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, "no API at "+c.method+" "+c.path) {
			t.Errorf("%s %s: %d %q, want 404 with a JSON error", c.method, c.path, code, body)
		}
	}
	// The event page is the console's, not an API.
	if code, body := do(t, "GET", srv.URL+"/events/12", nil, ""); code != http.StatusOK || !strings.Contains(body, "event.js") {
		t.Errorf("/events/12: %d %.80q", code, body)
	}
}

// A refused action is logged with its reason and the client's address,
// never the token; a proxy's page is the console's own when its origin is
// the forwarded host or http.public_url.
func TestRefusedActionsAreLoggedAndProxiesAccepted(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	srv, log := apiServer(t, db, "https://ops.example.com/searchsync")
	retry := srv.URL + "/api/events/1/retry"
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, c := range []struct {
		name   string
		header map[string]string
		code   int
		logged string
	}{
		{"no token", nil, http.StatusUnauthorized, `reason="the operator token (header X-Searchsync-Token) is missing"`},
		{"wrong token", map[string]string{TokenHeader: "guess", "X-Forwarded-For": "203.0.113.9"}, http.StatusUnauthorized,
			`reason="the operator token (header X-Searchsync-Token) is wrong"`},
		{"cross-site", map[string]string{TokenHeader: testToken, "Origin": "https://evil.example.net"}, http.StatusForbidden,
			`reason="cross-site request refused: Origin https://evil.example.net is not ` + host + ` nor http.public_url https://ops.example.com"`},
		{"another site's fetch", map[string]string{TokenHeader: testToken, "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden, "Sec-Fetch-Site is cross-site"},
	} {
		code, body := do(t, "POST", retry, c.header, "")
		if code != c.code {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.code)
		}
		if !strings.Contains(log.String(), c.logged) {
			t.Errorf("%s: the log lacks %s:\n%s", c.name, c.logged, log.String())
		}
	}
	if !strings.Contains(log.String(), "client=127.0.0.1:") || !strings.Contains(log.String(), "forwarded_for=203.0.113.9") {
		t.Errorf("the refusals do not name the client:\n%s", log.String())
	}
	if strings.Contains(log.String(), testToken) || strings.Contains(log.String(), "guess") {
		t.Errorf("a token reached the log:\n%s", log.String())
	}

	// Accepted: the forwarded host, and the public URL behind a proxy that
	// forwards no host (nginx's default: Host is the upstream's). A dry
	// run of nothing answers 200.
	dry := `{"action": "retry", "ids": [1], "dry_run": true}`
	for name, h := range map[string]map[string]string{
		"forwarded host": {TokenHeader: testToken, "Origin": "https://console.internal", "X-Forwarded-Host": "console.internal"},
		"public url":     {TokenHeader: testToken, "Origin": "https://ops.example.com", "Host": "127.0.0.1:8080"},
	} {
		if code, body := do(t, "POST", srv.URL+"/api/actions", h, dry); code != http.StatusOK {
			t.Errorf("%s: %d %s, want 200", name, code, body)
		}
	}
	// Without http.public_url the refusal says what to configure.
	plain, _ := apiServer(t, db, "")
	_, body := do(t, "POST", plain.URL+"/api/actions", map[string]string{TokenHeader: testToken, "Origin": "https://ops.example.com"}, dry)
	if !strings.Contains(body, "set http.public_url") {
		t.Errorf("the refusal behind a proxy does not name http.public_url: %s", body)
	}
}

// /api/events takes any status and an aggregate id; /api/events/{id} lists
// every routed consumer's delivery; /api/state carries the verdict and the
// indexes.
func TestEventsAnyStatusAndTheStateVerdict(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	agg := uuid.New()
	var ids []int64
	for _, st := range []string{"dispatched", "failed", "pending"} {
		var id int64
		if err := db.Pool.QueryRow(ctx, `INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload, status, dispatched_at, last_error)
			VALUES ('entity.customer.updated', 'DDM_ENTITY', $1, '{"version": 1}', $2::text::outbox_status, CASE WHEN $2 = 'dispatched' THEN now() END,
			        CASE WHEN $2 = 'failed' THEN 'search: engine answered 400' END) RETURNING id`, agg, st).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO aa_relay_instance (id, hostname, pid, partitions, expires_at) VALUES ('relay-1', 'host', 1, 16, now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	srv, _ := apiServer(t, db, "")
	for status, want := range map[string]int{"dispatched": 1, "any": 3, "failed": 1} {
		_, body := do(t, "GET", srv.URL+"/api/events?status="+status+"&aggregate_id="+agg.String(), nil, "")
		var page EventsPage
		if err := json.Unmarshal([]byte(body), &page); err != nil || len(page.Events) != want {
			t.Errorf("status %s: %d events (%v), want %d: %s", status, len(page.Events), err, want, body)
		}
	}
	if code, body := do(t, "GET", srv.URL+"/api/events?status=gone", nil, ""); code != http.StatusBadRequest || !strings.Contains(body, "want failed, pending, dispatched, skipped or any") {
		t.Errorf("status gone: %d %s", code, body)
	}
	_, body := do(t, "GET", srv.URL+"/api/events/"+strconv.FormatInt(ids[0], 10), nil, "")
	var d EventDetail
	if err := json.Unmarshal([]byte(body), &d); err != nil || len(d.Consumers) != 2 || d.Consumers[0].State != outboxadmin.DeliveryDone || d.Consumers[0].DeliveredAt == nil {
		t.Errorf("a dispatched event's deliveries: %+v (%v)", d.Consumers, err)
	}

	_, body = do(t, "GET", srv.URL+"/api/state", nil, "")
	var st State
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	// The failed event makes both consumers failing (it is routed to
	// both); the yellow index adds its reason.
	if st.Health.State != lag.HealthDegraded || !strings.Contains(strings.Join(st.Health.Reasons, "|"), "index customers: the engine reports it yellow") {
		t.Errorf("state health %+v", st.Health)
	}
	if len(st.Indexes) != 1 || st.Indexes[0].Health != lag.HealthDegraded {
		t.Errorf("indexes %+v", st.Indexes)
	}
}

// The verdict on an index from what the engine and the drift check said.
func TestAliasJudge(t *testing.T) {
	for _, c := range []struct {
		a    AliasDrift
		want string
	}{
		{AliasDrift{Index: "c_v1", Drift: DriftNone, EngineHealth: "green"}, lag.HealthHealthy},
		{AliasDrift{Index: "c_v1", Drift: DriftNone, EngineHealth: "yellow"}, lag.HealthDegraded},
		{AliasDrift{Index: "c_v1", Drift: DriftDiffers, EngineHealth: "green", Message: "reindex required"}, lag.HealthDegraded},
		{AliasDrift{Index: "c_v1", Drift: DriftNone, EngineHealth: "red"}, lag.HealthFailing},
		{AliasDrift{Drift: DriftNone, Message: "alias customers is missing"}, lag.HealthFailing},
		{AliasDrift{Index: "c_v1", Drift: DriftNone, StatsError: "health: 403 security_exception"}, "unknown"},
		{AliasDrift{Drift: DriftUnknown, Message: "not checked yet"}, "unknown"},
	} {
		c.a.Judge()
		if c.a.Health != c.want {
			t.Errorf("%+v: %s, want %s", c.a, c.a.Health, c.want)
		}
	}
}
