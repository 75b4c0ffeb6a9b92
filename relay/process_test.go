package relay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
)

// binary is searchsync, built once for every package that runs it
// (testenv.Binary).
var binary string

func TestMain(m *testing.M) { testenv.MainWithBinary(m, &binary) }

// writeConfig writes a configuration for the test's schema whose webhook
// consumer posts to url.
func writeConfig(t testing.TB, dbURL, schema, hookURL, listen, extra string) string {
	t.Helper()
	cfg := fmt.Sprintf(`database:
  url: %q
  schema: %s
relay:
  partitions: 16
  batch_size: 200
  poll_interval: 500ms
  lease_ttl: 2s
  backoff: {initial: 100ms, max: 1s}
http:
  listen: %s
log:
  level: info
  format: json
compaction:
  interval: -1s
consumers:
  - name: hook
    type: webhook
    webhook:
      url: %s
      secret: whsec_dGVzdC1zZWNyZXQtdGVzdC1zZWNyZXQ=
      concurrency: 16
routes:
  - consumer: hook
%s`, dbURL, schema, listen, hookURL, extra)
	p := filepath.Join(t.TempDir(), "searchsync.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// proc is one `searchsync run`.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    *bytes.Buffer
	done   chan struct{}
	err    error
	listen string
	start  time.Time
}

type syncBuffer struct {
	mu sync.Mutex
	bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Buffer.Write(p)
}

func startProc(t testing.TB, name, cfgPath, listen string, args ...string) *proc {
	t.Helper()
	var log syncBuffer
	cmd := exec.Command(binary, append([]string{"run", "-c", cfgPath}, args...)...)
	cmd.Env = append(os.Environ(), "DATABASE_URL=", "SEARCHSYNC_CONFIG=", "SEARCHSYNC_HTTP_LISTEN=")
	cmd.Stdout = &log
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, log: &log.Buffer, done: make(chan struct{}), listen: listen, start: time.Now()}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			log.mu.Lock()
			t.Logf("--- log of %s (last 3000 bytes):\n%s", name, tail(log.String(), 3000))
			log.mu.Unlock()
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// stop sends SIGTERM and expects exit code 0 within the deadline.
func (p *proc) stop(t testing.TB) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop within 30s of SIGTERM", p.name)
	}
	if p.err != nil {
		t.Errorf("%s: exit after SIGTERM: %v, want 0", p.name, p.err)
	}
}

func (p *proc) kill9(t testing.TB) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *proc) healthy() bool {
	resp, err := http.Get("http://" + p.listen + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (p *proc) ready() bool {
	resp, err := http.Get("http://" + p.listen + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// produce writes n events over the aggregates through the producer API from
// several goroutines at once, in transactions of 1–5 events.
func produce(t testing.TB, db *testenv.DB, aggs []uuid.UUID, n, workers, seed int) {
	t.Helper()
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})
	ctx := context.Background()
	var wg sync.WaitGroup
	per := n / workers
	errs := make(chan error, workers)
	for g := range workers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(g+seed), 42))
			left := per
			if g == workers-1 {
				left = n - per*(workers-1)
			}
			for left > 0 {
				k := min(left, 1+rnd.IntN(5))
				evs := make([]outbox.Event, k)
				for i := range evs {
					a := aggs[rnd.IntN(len(aggs))]
					p, _ := json.Marshal(map[string]any{"worker": g, "left": left - i, "entity_id": a})
					evs[i] = outbox.Event{EventType: "entity.customer.updated", AggregateType: "DDM_ENTITY", AggregateID: &a, Payload: p}
				}
				if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
					_, err := w.Write(ctx, tx, evs...)
					return err
				}); err != nil {
					errs <- err
					return
				}
				left -= k
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func threeRelays(t *testing.T, killOne bool) {
	db := testenv.NewDB(t)
	rc := newReceiver(t)
	const nAggs, nEvents = 200, 20000
	aggs := make([]uuid.UUID, nAggs)
	for i := range aggs {
		aggs[i] = uuid.New()
	}
	began := time.Now()
	first := 0
	if killOne {
		// Build a backlog first and answer slowly, so the kill hits a relay
		// with a batch in flight.
		first = nEvents / 2
		rc.delay = 2 * time.Millisecond
		produce(t, db, aggs, first, 8, 0)
	}
	procs := make([]*proc, 3)
	for i := range procs {
		listen := testenv.FreeAddr(t)
		procs[i] = startProc(t, fmt.Sprintf("relay-%d", i), writeConfig(t, db.URL, db.Schema, rc.URL, listen, ""), listen)
	}
	// Start-up must not wait on another relay (or on another schema's
	// migration): each answers /healthz within seconds of its start.
	var ups []string
	for _, p := range procs {
		testenv.Eventually(t, 30*time.Second, p.healthy, "%s /healthz answers 200 after its start", p.name)
		ups = append(ups, time.Since(p.start).Round(time.Millisecond).String())
	}
	t.Logf("start → /healthz 200 per relay: %v", ups)
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		produce(t, db, aggs, nEvents-first, 8, 100)
	}()

	if killOne {
		// Kill relay 1 with SIGKILL once a third is through, then restart it.
		testenv.Eventually(t, 120*time.Second, func() bool { return rc.distinct() >= nEvents/4 }, "a quarter delivered")
		var owned []int
		rows, _ := db.Pool.Query(context.Background(), `SELECT count(*) FROM aa_relay_lease WHERE expires_at > now() GROUP BY owner ORDER BY owner`)
		for rows.Next() {
			var n int
			rows.Scan(&n)
			owned = append(owned, n)
		}
		rows.Close()
		t.Logf("partitions per live owner before the kill: %v", owned)
		irows, _ := db.Pool.Query(context.Background(), `SELECT i.id, i.expires_at > now(), (SELECT count(*) FROM aa_relay_lease l WHERE l.owner = i.id) FROM aa_relay_instance i`)
		for irows.Next() {
			var id string
			var live bool
			var n int
			irows.Scan(&id, &live, &n)
			t.Logf("instance %s live %v leases %d", id, live, n)
		}
		irows.Close()
		procs[1].kill9(t)
		t.Logf("relay-1 killed with SIGKILL at %d delivered", rc.distinct())
		listen := testenv.FreeAddr(t)
		procs[1] = startProc(t, "relay-1-restarted", writeConfig(t, db.URL, db.Schema, rc.URL, listen, ""), listen)
	}
	<-produced
	if t.Failed() {
		return
	}
	t.Logf("%d events written in %s; %d delivered by then", nEvents, time.Since(began).Round(time.Millisecond), rc.distinct())
	testenv.Eventually(t, 180*time.Second, func() bool { return rc.distinct() == nEvents }, "receiver saw every event (has %d)", rc.distinct())
	testenv.Eventually(t, 30*time.Second, func() bool { return countStatus(t, db, "dispatched") == nEvents }, "every event dispatched")
	t.Logf("all delivered and dispatched after %s", time.Since(began).Round(time.Millisecond))
	rc.checkOrder(t)

	// Every relay is alive and ready and shares the partitions.
	for _, p := range procs {
		testenv.Eventually(t, 20*time.Second, p.healthy, "%s /healthz answers 200", p.name)
		testenv.Eventually(t, 20*time.Second, p.ready, "%s ready", p.name)
	}
	var owners int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(DISTINCT owner) FROM aa_relay_lease WHERE expires_at > now()`).Scan(&owners); err != nil {
		t.Fatal(err)
	}
	if owners != 3 {
		t.Errorf("%d lease owners, want 3", owners)
	}
	dups := 0
	rc.mu.Lock()
	for _, c := range rc.count {
		dups += c - 1
	}
	rc.mu.Unlock()
	t.Logf("%d events, %d duplicate deliveries", nEvents, dups)

	var pids []string
	for _, p := range procs {
		p.stop(t)
		pids = append(pids, fmt.Sprintf("%%-%d-%%", p.cmd.Process.Pid))
	}
	// A graceful stop hands its leases back; the relay killed with SIGKILL
	// leaves what it held (the others take it over once it expires, or not
	// at all when they stop first), so only the stopped ones are counted.
	var held, instances int
	db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM aa_relay_lease WHERE owner LIKE ANY($1)`, pids).Scan(&held)
	db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM aa_relay_instance WHERE expires_at > now()`).Scan(&instances)
	if held != 0 || instances != 0 {
		t.Errorf("after graceful stops: %d leases held by the stopped relays, %d live instances; want none", held, instances)
	}
}

// Three `searchsync run` processes, 200 aggregates, 20,000 events written
// concurrently: every event arrives, first deliveries in id order per aggregate.
func TestThreeRelayProcesses(t *testing.T) {
	t.Parallel()
	threeRelays(t, false)
}

// The same with one relay killed with SIGKILL mid-run and restarted.
func TestThreeRelayProcessesOneKilled(t *testing.T) {
	t.Parallel()
	threeRelays(t, true)
}

// run runs searchsync with args and returns its exit code and output.
func run(t testing.TB, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(append(os.Environ(), "DATABASE_URL=", "SEARCHSYNC_CONFIG=", "SEARCHSYNC_HTTP_LISTEN="), env...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd = exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	cmd.Env = append(append(os.Environ(), "DATABASE_URL=", "SEARCHSYNC_CONFIG=", "SEARCHSYNC_HTTP_LISTEN="), env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	default:
		t.Fatalf("run %v: %v", args, err)
		return -1, ""
	}
}

// Bad input at start-up: each a clear error, a non-zero exit, nothing touched.
func TestRunRejectsBadInput(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	agg := uuid.New()
	id := write(t, db, event(&agg, "entity.customer.updated", "DDM_ENTITY", 1))[0]
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o600)
		return p
	}
	good := writeConfig(t, db.URL, db.Schema, "http://127.0.0.1:9/", testenv.FreeAddr(t), "")
	goodText, _ := os.ReadFile(good)
	unmigrated := testenv.Name("unmigrated")
	t.Cleanup(func() { db.Pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+unmigrated+" CASCADE") })

	cases := []struct {
		name string
		cfg  string
		want []string
	}{
		{"malformed yaml", file("malformed.yaml", "database:\n  url: [unclosed\n"), []string{"malformed.yaml"}},
		{"bad value", file("bad.yaml", strings.Replace(string(goodText), "partitions: 16", "partitions: -3", 1)),
			[]string{"bad.yaml", "relay.partitions", "must be positive"}},
		{"unknown consumer", file("unknown.yaml", string(goodText)+"  - consumer: nobody\n"),
			[]string{"unknown.yaml", "routes[1].consumer", `unknown consumer "nobody"`}},
		{"unreachable database", file("down.yaml", strings.Replace(string(goodText), db.URL, "postgres://searchsync:searchsync@127.0.0.1:1/searchsync?sslmode=disable", 1)),
			[]string{"cannot reach PostgreSQL at 127.0.0.1:1"}},
		{"unmigrated schema", file("unmigrated.yaml", strings.Replace(string(goodText), "schema: "+db.Schema, "schema: "+unmigrated, 1)),
			[]string{"searchsync migrate up"}},
	}
	for _, tc := range cases {
		code, out := run(t, nil, "run", "-c", tc.cfg)
		if code == 0 {
			t.Errorf("%s: exit 0, want an error\n%s", tc.name, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, w, out)
			}
		}
	}
	if got := getRow(t, db, id); got.Status != "pending" || got.Attempts != 0 || got.LastError != nil {
		t.Errorf("event after bad start-ups: %+v, want untouched", got)
	}
}
