package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/searchsync/searchsync/internal/testenv"
)

// TestEachCommandReadsOnlyItsSecrets configures an operator token, a
// webhook secret and a NATS token from environment variables that are not
// set: the commands that do not use them (migrate, status, outbox,
// compact, reindex status, search) run; run, which uses them all, refuses
// to start and names every missing one at once, never a value. The
// commands log warnings and errors only, unless -v.
func TestEachCommandReadsOnlyItsSecrets(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	cfg := writeConfig(t, fmt.Sprintf(`
database: {url: %q, schema: %s}
engine: {urls: [%q]}
http: {operator_token: "env:SEARCHSYNC_TEST_UNSET_OPERATOR_TOKEN"}
consumers:
  - {name: hook, type: webhook, webhook: {url: "http://127.0.0.1:9/", secret: "env:SEARCHSYNC_TEST_UNSET_WEBHOOK_SECRET"}}
  - {name: queue, type: nats, nats: {url: "nats://127.0.0.1:9", stream: OUTBOX, token: "env:SEARCHSYNC_TEST_UNSET_NATS_TOKEN"}}
routes:
  - {consumer: hook}
  - {consumer: queue}
`, db.URL, db.Schema, testenv.EngineURL(t)))
	env := []string{"DATABASE_URL="}
	for _, args := range [][]string{
		{"migrate", "up"}, {"migrate", "status"}, {"status"}, {"outbox", "list"}, {"outbox", "status"},
		// The search names this test's own indexes (none exist): a
		// wildcard over the shared cluster would meet other tests'
		// indexes while their shards are still being allocated.
		{"compact", "--dry-run"}, {"reindex", "status"}, {"search", db.Schema + "_*"},
	} {
		_, stderr, code := runCLI(t, env, append([]string{"-c", cfg}, args...)...)
		if code != 0 || strings.Contains(stderr, "SEARCHSYNC_TEST_UNSET") {
			t.Errorf("%s: exit %d, wants a secret it does not use:\n%s", strings.Join(args, " "), code, stderr)
		}
		// An operator's command logs warnings and errors only.
		if strings.Contains(stderr, `"level":"INFO"`) {
			t.Errorf("%s logs at info without -v:\n%s", strings.Join(args, " "), stderr)
		}
	}
	out, _, _ := runCLI(t, env, "-c", cfg, "migrate", "up")
	if want := "schema " + db.Schema + " is up to date"; !strings.Contains(out, want) {
		t.Errorf("migrate up printed %q, want %q", out, want)
	}
	if _, stderr, _ := runCLI(t, env, "-c", cfg, "-v", "compact"); !strings.Contains(stderr, `"level":"INFO","msg":"compaction: done"`) {
		t.Errorf("compact -v does not log at info:\n%s", stderr)
	}
	_, stderr, code := runCLI(t, env, "-c", cfg, "run")
	if code == 0 {
		t.Fatalf("run started without its secrets")
	}
	for _, want := range []string{"http.operator_token: environment variable SEARCHSYNC_TEST_UNSET_OPERATOR_TOKEN is not set",
		"consumers[0].webhook.secret: environment variable SEARCHSYNC_TEST_UNSET_WEBHOOK_SECRET is not set",
		"consumers[1].nats.token: environment variable SEARCHSYNC_TEST_UNSET_NATS_TOKEN is not set"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("run: the error lacks %q:\n%s", want, stderr)
		}
	}
}
