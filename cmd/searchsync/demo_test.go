package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/searchsync/searchsync/internal/testenv"
)

// TestDemoRunsAndStopsOnInterrupt runs `searchsync demo` on the demo's own
// configuration (with this test's schema, port and stream): documents become
// searchable, the backlog drains, a customer is found by the name of one of
// its contact persons (the customer-contact relation), and Ctrl-C (SIGINT)
// stops it cleanly with exit code 0.
func TestDemoRunsAndStopsOnInterrupt(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	engineURL := testenv.EngineURL(t)
	addr := testenv.FreeAddr(t)
	stream := "DEMO_" + db.Schema
	cmd := exec.Command(binary, "-c", "", "demo", "--rate", "100", "--burst", "1s")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+db.URL, "SEARCHSYNC_SCHEMA="+db.Schema, "SEARCHSYNC_HTTP_LISTEN="+addr,
		"SEARCHSYNC_ENGINE_URL="+engineURL, "SEARCHSYNC_LOG_FORMAT=json")
	// The demo's NATS stream and subjects are per test.
	cfg, err := os.ReadFile("../../examples/demo/searchsync.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := writeConfig(t, string(cfg))
	cfgText := string(cfg)
	cfgText = strings.Replace(cfgText, "stream: DEMO_OUTBOX", "stream: "+stream, 1)
	cfgText = strings.Replace(cfgText, `subject: "demo.{aggregate_type}.{event_type}"`, fmt.Sprintf(`subject: "%s.{aggregate_type}.{event_type}"`, db.Schema), 1)
	if err := os.WriteFile(cfgFile, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd.Args[2] = cfgFile
	logFile := filepath.Join(t.TempDir(), "demo.log")
	lf, _ := os.Create(logFile)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
		lf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("demo log:\n%s", b)
		}
	}()

	// Documents arrive and the relay keeps up.
	var dispatched int64
	testenv.Eventually(t, 90*time.Second, func() bool {
		db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM aa_outbox_event WHERE status = 'dispatched'`).Scan(&dispatched)
		return dispatched >= 300
	}, "demo dispatched only %d events", dispatched)
	testenv.Eventually(t, 20*time.Second, func() bool { return ready(addr) }, "demo relay ready (/readyz)")
	// The banner's commands name the binary and the configuration file, so
	// that they work pasted into another terminal.
	banner, _ := os.ReadFile(logFile)
	if want := "status:     " + binary + " -c " + cfgFile + " status"; !strings.Contains(string(banner), want) {
		t.Errorf("the banner lacks %q:\n%s", want, banner)
	}
	out, stderr, code := runCLI(t, []string{"DATABASE_URL=" + db.URL, "SEARCHSYNC_SCHEMA=" + db.Schema, "SEARCHSYNC_ENGINE_URL=" + engineURL},
		"-c", cfgFile, "search", "customers", "--size", "1")
	if code != 0 || !contains(out, "documents match in customers") {
		t.Fatalf("search: %d %s %s", code, out, stderr)
	}

	// Persons and relations arrive too: a customer lists its contact persons,
	// and `searchsync search customers <a contact's name>` finds it by that
	// name (persons' names are none of the customers' own names).
	var custID, name string
	testenv.Eventually(t, 60*time.Second, func() bool {
		custID, name = customerWithContact(t, engineURL)
		return custID != ""
	}, "no customer of this demo lists a contact person with a name")
	out, stderr, code = runCLI(t, []string{"SEARCHSYNC_ENGINE_URL=" + engineURL}, "-c", cfgFile, "search", "customers", name, "--size", "10000")
	if code != 0 || !strings.Contains(out, custID) {
		t.Fatalf("search customers %q does not list customer %s (exit %d):\n%.2000s\n%s", name, custID, code, out, stderr)
	}
	if n := countDocs(t, engineURL, "persons", `{"exists":{"field":"contact_of.customer_id"}}`); n == 0 {
		t.Errorf("no person lists the customers it is a contact of")
	}

	// Ctrl-C stops it cleanly.
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("demo exited with %v after SIGINT", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("demo did not stop within 30 s of SIGINT")
	}
	var leases int
	db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM aa_relay_lease WHERE owner IS NOT NULL AND expires_at > now()`).Scan(&leases)
	if leases != 0 {
		t.Errorf("%d partition leases still held after a clean stop", leases)
	}
}

// customerWithContact returns a customer whose document lists a contact
// person with a name, and that name ("" when there is none yet).
func customerWithContact(t *testing.T, engineURL string) (id, name string) {
	t.Helper()
	body := `{"size":1,"query":{"exists":{"field":"contacts.name"}},"sort":[{"_doc":"desc"}]}`
	resp, err := http.Post(engineURL+"/customers/_search", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res struct {
		Hits struct {
			Hits []struct {
				ID     string `json:"_id"`
				Source struct {
					Contacts []struct {
						Name string `json:"name"`
					} `json:"contacts"`
				} `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || len(res.Hits.Hits) == 0 {
		return "", ""
	}
	h := res.Hits.Hits[0]
	for _, c := range h.Source.Contacts {
		if c.Name != "" {
			return h.ID, c.Name
		}
	}
	return "", ""
}

// countDocs counts the documents of alias that match query.
func countDocs(t *testing.T, engineURL, alias, query string) int {
	t.Helper()
	resp, err := http.Post(engineURL+"/"+alias+"/_count", "application/json", strings.NewReader(`{"query":`+query+`}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res struct{ Count int }
	json.NewDecoder(resp.Body).Decode(&res)
	return res.Count
}
