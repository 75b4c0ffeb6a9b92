package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const good = `
database:
  url: postgres://u:p@127.0.0.1:5432/db
relay:
  batch_size: 200
  backoff:
    initial: 500ms
consumers:
  - name: crm
    type: webhook
    webhook:
      url: http://127.0.0.1:9999/hook
      secret: whsec_c2VjcmV0
routes:
  - consumer: crm
    event_types: ["entity.customer.*"]
`

func TestParseFillsDefaults(t *testing.T) {
	c, err := Parse("good.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if c.Database.Schema != "mdm" || c.Relay.BatchSize != 200 || c.Relay.Backoff.Initial != 500*time.Millisecond ||
		c.Relay.Backoff.Max != 10*time.Minute || c.Compaction.Retention != 240*time.Hour ||
		c.Consumers[0].Webhook.Timeout != 10*time.Second || c.Engine.URLs[0] != "http://127.0.0.1:9200" {
		t.Fatalf("defaults not applied: %+v", c)
	}
	// The relay's and compactor's defaults come from their packages.
	if r := c.Relay; r.Partitions != 32 || r.InFlight != 2 || r.LeaseTTL != 15*time.Second || r.Pause.ProbeMax != 3*time.Second ||
		r.Backoff.Jitter != 0.2 || c.Compaction.Interval != time.Hour || c.Compaction.BatchSize != 1000 {
		t.Fatalf("package defaults not applied: %+v %+v", c.Relay, c.Compaction)
	}
	if r := c.Routes[0].Rule("webhook"); !r.Matches("entity.customer.updated", "DDM_ENTITY") || r.Matches("entity.order.updated", "DDM_ENTITY") {
		t.Fatal("route matching")
	}
	// Snapshot events go to search consumers, to others only when a route
	// says snapshots: true.
	yes := true
	for _, c := range []struct {
		typ       string
		snapshots *bool
		want      bool
	}{{"webhook", nil, false}, {"nats", nil, false}, {"search", nil, true}, {"webhook", &yes, true}} {
		r := Route{Consumer: "x", Snapshots: c.snapshots}
		if got := r.Rule(c.typ).Matches("entity.customer.snapshot", "DDM_ENTITY"); got != c.want {
			t.Errorf("a %s route (snapshots %v) takes a snapshot: %v, want %v", c.typ, c.snapshots, got, c.want)
		}
	}
}

func TestBadConfigurationNamesFileKeyLineAndReason(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"unknown consumer in route", good + "  - consumer: nope\n", `bad.yaml:17: routes[1].consumer: names unknown consumer "nope"`},
		{"bad url", strings.Replace(good, "http://127.0.0.1:9999/hook", "ftp:/x", 1), `bad.yaml:12: consumers[0].webhook.url: "ftp:/x" is not an absolute http(s) URL`},
		{"negative batch", strings.Replace(good, "batch_size: 200", "batch_size: -1", 1), `bad.yaml:5: relay.batch_size: must be positive`},
		// Checks relay.Config and compaction.Config own, pointed at the key's line.
		{"backoff max below initial", strings.Replace(good, "initial: 500ms", "initial: 500ms\n    max: 100ms", 1), `bad.yaml:8: relay.backoff.max: must not be smaller than relay.backoff.initial`},
		{"probe max below default initial", strings.Replace(good, "batch_size: 200", "batch_size: 200\n  pause: {probe_max: 500ms}", 1), `bad.yaml:6: relay.pause.probe_max: must not be smaller than relay.pause.probe_initial`},
		{"short retention", good + "compaction: {retention: 30s}\n", `bad.yaml:17: compaction.retention: must be at least 1m`},
		{"unknown key", good + "bogus: 1\n", `bad.yaml:17: bogus: unknown field "bogus"`},
		{"unknown nested key", strings.Replace(good, "batch_size: 200", "batch_size: 200\n  bogus: 1", 1), `bad.yaml:6: relay.bogus: unknown field "bogus"`},
		{"wrong type", strings.Replace(good, "batch_size: 200", "batch_size: many", 1), `bad.yaml:5: relay.batch_size: "many" is not a whole number`},
		{"wrong type in flow style", strings.Replace(good, "relay:\n  batch_size: 200\n  backoff:\n    initial: 500ms", "relay: {batch_size: 1, in_flight: many}", 1), `bad.yaml:4: relay.in_flight: "many" is not a whole number`},
		{"bad duration", strings.Replace(good, "initial: 500ms", "initial: soon", 1), `bad.yaml:7: relay.backoff.initial: "soon" is not a duration: write one with its unit, such as 500ms, 10s or 5m`},
		{"duration without a unit", strings.Replace(good, "initial: 500ms", "initial: 500", 1), `bad.yaml:7: relay.backoff.initial: "500" is not a duration: write one with its unit, such as 500ms`},
		{"misspelt consumer in route", good + "  - consumer: crn\n", `bad.yaml:17: routes[1].consumer: names unknown consumer "crn" (did you mean "crm"?)`},
		{"misspelt key", strings.Replace(good, "batch_size: 200", "batch_sise: 200", 1), `bad.yaml:5: relay.batch_sise: unknown field "batch_sise" (did you mean "batch_size"?)`},
		{"misspelt section", good + "compactoin: {retention: 48h}\n", `bad.yaml:17: compactoin: unknown field "compactoin" (did you mean "compaction"?)`},
		{"misspelt watermark key", strings.Replace(good, "batch_size: 200", "batch_size: 200\n  watermark: {max_wiat: 5s}", 1), `relay.watermark.max_wiat: unknown field "max_wiat" (did you mean "max_wait"?)`},
		{"syntax error", good + "routes: [\n", "bad.yaml:"},
		{"duplicate key", good + "relay: {}\n", `bad.yaml:17: relay: mapping key "relay" already defined at line 4`},
		{"bad schema", good + "  \n", ""},
		{"missing type", strings.Replace(good, "type: webhook", "type: carrier-pigeon", 1), `consumers[0].type: "carrier-pigeon" is not one of webhook, nats, search`},
		{"pprof without a token", good + "http: {pprof: true}\n", `bad.yaml:17: http.pprof: needs http.operator_token`},
		{"no database", strings.Replace(good, "url: postgres://u:p@127.0.0.1:5432/db", "schema: mdm", 1), `database.url: is required`},
	}
	for _, tc := range cases {
		_, err := Parse("bad.yaml", []byte(tc.yaml))
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: unexpected error %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}

// A URL with a port inside a flow sequence is plain YAML; an earlier parser
// read it as a mapping.
func TestFlowStyleWithURLs(t *testing.T) {
	c, err := Parse("flow.yaml", []byte("database: {url: 'postgres://u@127.0.0.1:5432/db'}\n"+
		"engine: {kind: opensearch, urls: [http://127.0.0.1:9200, https://b.example:9243]}\n"+
		"consumers: [{name: bus, type: nats, nats: {url: nats://127.0.0.1:4222, stream: OUTBOX}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Engine.URLs; len(got) != 2 || got[0] != "http://127.0.0.1:9200" || got[1] != "https://b.example:9243" {
		t.Fatalf("engine.urls = %q", got)
	}
	if c.Consumers[0].Nats.URL != "nats://127.0.0.1:4222" {
		t.Fatalf("nats.url = %q", c.Consumers[0].Nats.URL)
	}
}

func TestErrorsAreTyped(t *testing.T) {
	_, err := Parse("bad.yaml", []byte(strings.Replace(good, "batch_size: 200", "batch_size: -1", 1)))
	for _, err := range unjoin(err) {
		if ce, ok := errors.AsType[*Error](err); ok && ce.Key == "relay.batch_size" && ce.Line == 5 && ce.File == "bad.yaml" {
			return
		}
	}
	t.Fatalf("got %#v", err)
}

func TestLoadAppliesEnvironment(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(f, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", "postgres://other@db:5432/x")
	t.Setenv("SEARCHSYNC_ENGINE_URL", "http://a:9200,http://b:9200")
	c, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	if c.Database.URL != "postgres://other@db:5432/x" || len(c.Engine.URLs) != 2 {
		t.Fatalf("env not applied: %+v", c)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestNoDatabaseLetsTheURLBeMissingButChecksAGivenOne(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	if _, err := Load(""); err == nil || !strings.Contains(err.Error(), "database.url: is required") {
		t.Fatalf("without NoDatabase: %v", err)
	}
	c, err := Load("", NoDatabase())
	if err != nil {
		t.Fatalf("NoDatabase: %v", err)
	}
	if len(c.Engine.URLs) == 0 {
		t.Errorf("engine defaults not filled: %+v", c.Engine)
	}
	t.Setenv("DATABASE_URL", "mysql://x")
	if _, err := Load("", NoDatabase()); err == nil || !strings.Contains(err.Error(), "database.url: must be a postgres:// URL") {
		t.Fatalf("NoDatabase with a bad URL: %v", err)
	}
}
