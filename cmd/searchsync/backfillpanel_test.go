package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/searchsync/searchsync/backfill"
	"github.com/searchsync/searchsync/dashboard"
	"github.com/searchsync/searchsync/internal/testenv"
)

// backfillPost sends a backfill action to the console at addr with the
// operator token.
func backfillPost(t *testing.T, addr, source, action string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/api/backfill/"+source+"/"+action, strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(dashboard.TokenHeader, token)
	req.Header.Set(dashboard.OperatorHeader, "ada")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// backfillJob is the newest job of source as /api/backfill shows it (nil:
// none).
func backfillJob(t *testing.T, addr, source string) *dashboard.BackfillJob {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/api/backfill")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r dashboard.BackfillResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/backfill: %d %v", resp.StatusCode, err)
	}
	for _, row := range r.Sources {
		if row.Source.Name == source {
			return row.Job
		}
	}
	t.Fatalf("/api/backfill has no row of %s", source)
	return nil
}

// TestConsoleBackfill runs `searchsync run` with two backfill sources: a
// backfill started through the console's API runs in the relay to success
// (its snapshot events in the outbox, delivered); one running when the
// relay stops (SIGTERM) is released, and `searchsync status` lists it as
// interrupted (text and JSON) beside the finished one; `searchsync
// backfill` resumes it.
func TestConsoleBackfill(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE customer (id uuid PRIMARY KEY, name text NOT NULL);
INSERT INTO customer SELECT gen_random_uuid(), 'customer ' || g FROM generate_series(1, 60) g`); err != nil {
		t.Fatal(err)
	}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(hook.Close)
	tokenFile := filepath.Join(t.TempDir(), "operator-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	query := fmt.Sprintf(`SELECT c.id AS aggregate_id, 'entity.customer.snapshot' AS event_type, jsonb_build_object('version', 1, 'name', c.name) AS payload FROM %s.customer c`, db.Schema)
	addr := testenv.FreeAddr(t)
	cfg := writeConfig(t, fmt.Sprintf(`
database: {url: %q, schema: %s}
http: {listen: %q, operator_token: "file:%s"}
relay: {poll_interval: 200ms}
consumers:
  - {name: crm-hook, type: webhook, webhook: {url: %q, secret: whsec_c2VjcmV0}}
routes:
  - {consumer: crm-hook, event_types: ["entity.customer.*"], snapshots: true}
backfill:
  sources:
    - {name: customers, query: %q, chunk_size: 10}
    - {name: slow, query: %q, chunk_size: 5, rate: 10}
`, db.URL, db.Schema, addr, tokenFile, hook.URL, query, query))
	relay := startRelay(t, cfg, addr)

	if code, body := backfillPost(t, addr, "customers", "start"); code != http.StatusAccepted {
		t.Fatalf("start customers: %d %s", code, body)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		j := backfillJob(t, addr, "customers")
		return j != nil && j.State == backfill.StateSucceeded
	}, "the customers backfill did not succeed")
	corr := backfillJob(t, addr, "customers").CorrelationID
	testenv.Eventually(t, 30*time.Second, func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM aa_outbox_event WHERE correlation_id = $1::uuid AND status = 'dispatched'`, corr).Scan(&n)
		return err == nil && n == 60
	}, "the 60 snapshot events were not delivered")

	if code, body := backfillPost(t, addr, "slow", "start"); code != http.StatusAccepted {
		t.Fatalf("start slow: %d %s", code, body)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { j := backfillJob(t, addr, "slow"); return j != nil && j.Rows >= 5 },
		"the slow backfill wrote no chunk")
	stopRelay(t, relay)

	out, stderr, code := runCLI(t, []string{"DATABASE_URL="}, "-c", cfg, "status", "--json")
	if code != 0 {
		t.Fatalf("status --json: %d %s", code, stderr)
	}
	var doc struct {
		Backfills []dashboard.BackfillJob `json:"backfills"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Backfills) != 2 {
		t.Fatalf("status --json backfills: %v\n%s", err, out)
	}
	cust, slow := doc.Backfills[0], doc.Backfills[1]
	if cust.Source != "customers" || cust.State != backfill.StateSucceeded || cust.Rows != 60 ||
		slow.Source != "slow" || slow.State != backfill.StateInterrupted || slow.Owner != "" || slow.Rows >= 60 {
		t.Errorf("status --json backfills: %+v", doc.Backfills)
	}
	out, _, code = runCLI(t, []string{"DATABASE_URL="}, "-c", cfg, "status")
	if code != 0 || !contains(out, "BACKFILL", "customers", "succeeded", "60/60 (100%)", "interrupted",
		"backfill slow is interrupted after", "`searchsync backfill slow`") {
		t.Errorf("status table:\n%s", out)
	}

	// The CLI resumes what the console started.
	out, stderr, code = runCLI(t, []string{"DATABASE_URL="}, "-c", cfg, "backfill", "slow", "--json")
	var res backfill.Result
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || !res.Resumed || res.Rows != 60 {
		t.Errorf("backfill slow: %d %s %s", code, out, stderr)
	}
}
