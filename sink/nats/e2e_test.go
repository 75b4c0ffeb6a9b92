package nats_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/sink/nats"
	"github.com/searchsync/searchsync/sink/nats/natstest"
	"github.com/searchsync/searchsync/sink/webhook"
)

// End-to-end: real PostgreSQL, real nats-server, `searchsync run` processes
// built from this module.

const e2eSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// searchsyncBinary is the searchsync binary, built once for every package
// that runs it (testenv.Binary).
func searchsyncBinary(t *testing.T) string {
	t.Helper()
	bin, err := testenv.Binary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// hookReceiver is a webhook endpoint that verifies signatures and counts
// requests per event id, remembering the order of first arrivals.
type hookReceiver struct {
	mu       sync.Mutex
	active   map[string]int // requests in progress per path
	held     chan struct{}  // while not nil, requests wait until it is closed
	requests int
	count    map[int64]int
	first    []int64
	agg      map[int64]string
}

func newHookReceiver(t *testing.T, latency time.Duration) (*hookReceiver, string) {
	rc := &hookReceiver{count: map[int64]int{}, agg: map[int64]string{}, active: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.mu.Lock()
		rc.active[r.URL.Path]++
		held := rc.held
		rc.mu.Unlock()
		defer func() {
			rc.mu.Lock()
			rc.active[r.URL.Path]--
			rc.mu.Unlock()
		}()
		if held != nil {
			<-held
		}
		time.Sleep(latency) // a receiver's work; keeps batches in flight for a while
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify(e2eSecret, r.Header, body); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var m struct {
			ID          int64      `json:"id"`
			AggregateID *uuid.UUID `json:"aggregate_id"`
		}
		json.Unmarshal(body, &m)
		rc.mu.Lock()
		rc.requests++
		if rc.count[m.ID] == 0 {
			rc.first = append(rc.first, m.ID)
			rc.agg[m.ID] = m.AggregateID.String()
		}
		rc.count[m.ID]++
		rc.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return rc, srv.URL
}

// relayProc is one `searchsync run` process.
type relayProc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

func startRelay(t *testing.T, cfgPath, name string, env ...string) *relayProc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(searchsyncBinary(t), "-c", cfgPath, "run")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &relayProc{name: name, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			p.signal(syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("log of %s (last 4000 bytes):\n%s", name, tail(b, 4000))
		}
	})
	return p
}

func (p *relayProc) signal(sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Signal(sig)
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// e2eConfig writes the configuration of the relays.
func e2eConfig(t *testing.T, db *testenv.DB, hookURL, natsURL, stream, prefix, relayYAML string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "database: {url: %q, schema: %s}\n", db.URL, db.Schema)
	fmt.Fprintf(&b, "relay: %s\n", relayYAML)
	b.WriteString("http: {listen: \"127.0.0.1:0\"}\nlog: {format: json, level: info}\nconsumers:\n")
	if hookURL != "" {
		fmt.Fprintf(&b, "  - {name: hook, type: webhook, webhook: {url: %q, secret: %q}}\n", hookURL, e2eSecret)
	}
	fmt.Fprintf(&b, "  - {name: queue, type: nats, nats: {url: %q, stream: %s, subject: %q, create_stream: true}}\n",
		natsURL, stream, prefix+".{aggregate_type}.{aggregate_id}.{event_type}")
	b.WriteString("routes:\n  - {consumer: queue}\n")
	if hookURL != "" {
		b.WriteString("  - {consumer: hook}\n")
	}
	path := filepath.Join(t.TempDir(), "searchsync.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func relayEnv(db *testenv.DB, natsURL string) []string {
	return []string{"DATABASE_URL=" + db.URL, "SEARCHSYNC_SCHEMA=" + db.Schema, "SEARCHSYNC_NATS_URL=" + natsURL, "SEARCHSYNC_HTTP_LISTEN=127.0.0.1:0"}
}

// produce writes n events over the aggregates through the producer API, per
// transaction perTx events, pausing pause between transactions; it returns
// when done or ctx ends.
func produce(ctx context.Context, t *testing.T, db *testenv.DB, aggs []uuid.UUID, n, perTx int, pause time.Duration) error {
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})
	for written := 0; written < n; {
		batch := make([]outbox.Event, 0, perTx)
		for ; len(batch) < perTx && written < n; written++ {
			a := aggs[written%len(aggs)]
			batch = append(batch, outbox.Event{
				EventType: "entity.customer.updated", AggregateType: "DDM_ENTITY", AggregateID: &a,
				Payload: json.RawMessage(fmt.Sprintf(`{"version":%d,"after":{"n":%d}}`, written, written)),
			})
		}
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := w.Write(ctx, tx, batch...); err != nil {
			tx.Rollback(ctx)
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		if pause > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(pause):
			}
		}
	}
	return nil
}

type statusCounts struct{ pending, dispatched, failed, retried int }

func counts(t *testing.T, db *testenv.DB) statusCounts {
	t.Helper()
	var c statusCounts
	err := db.Pool.QueryRow(context.Background(), `SELECT
		count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'dispatched'),
		count(*) FILTER (WHERE status = 'failed'), count(*) FILTER (WHERE attempts > 0)
		FROM aa_outbox_event`).Scan(&c.pending, &c.dispatched, &c.failed, &c.retried)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func streamMsgs(t *testing.T, url, stream string) uint64 {
	nc, err := natsgo.Connect(url)
	if err != nil {
		return 0
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0
	}
	return s.CachedInfo().State.Msgs
}

// checkStream asserts that the stream holds every event of the database
// exactly once and, per aggregate, in id order; it returns the number of
// messages.
func checkStream(t *testing.T, db *testenv.DB, url, stream string) int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT id, aggregate_id FROM aa_outbox_event ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{}
	for rows.Next() {
		var id int64
		var agg uuid.UUID
		if err := rows.Scan(&id, &agg); err != nil {
			t.Fatal(err)
		}
		want[id] = agg.String()
	}
	rows.Close()
	msgs := natstest.Messages(t, url, stream)
	seen := map[int64]bool{}
	last := map[string]int64{}
	bad := 0
	for _, m := range msgs {
		id, err := strconv.ParseInt(m.Header.Get(jetstream.MsgIDHeader), 10, 64)
		agg := m.Header.Get(nats.HeaderAggregateID)
		switch {
		case err != nil:
			t.Errorf("message %d: Nats-Msg-Id %q", m.Sequence, m.Header.Get(jetstream.MsgIDHeader))
			bad++
		case seen[id]:
			t.Errorf("event %d stored twice (seq %d)", id, m.Sequence)
			bad++
		case want[id] != agg:
			t.Errorf("event %d: aggregate %s, database says %q", id, agg, want[id])
			bad++
		case last[agg] > id:
			t.Errorf("aggregate %s: event %d stored after event %d", agg, id, last[agg])
			bad++
		}
		if !strings.Contains(m.Subject, "."+agg+".") {
			t.Errorf("event %d on subject %s, not its aggregate's", id, m.Subject)
		}
		seen[id] = true
		last[agg] = id
		if bad > 20 {
			t.Fatal("too many errors")
		}
	}
	for id := range want {
		if !seen[id] {
			t.Errorf("event %d is not in the stream", id)
			if bad++; bad > 20 {
				t.Fatal("too many errors")
			}
		}
	}
	return len(msgs)
}

// TestRelayKilledMidRun: 10,000 events over 300 aggregates routed to a
// webhook and to the queue, two relays, one killed with SIGKILL mid-run (with
// a batch between publish and ack).
// The stream holds every event exactly once, in id order per aggregate; the
// redeliveries the webhook saw twice were absorbed by the duplicate window.
func TestRelayKilledMidRun(t *testing.T) {
	t.Parallel()
	const events, aggregates = 10000, 300
	db := testenv.NewDB(t)
	natsURL := natstest.URL(t)
	stream, prefix := names(t)
	t.Cleanup(func() { deleteStream(t, natsURL, stream) })
	hook, hookURL := newHookReceiver(t, 2*time.Millisecond)
	// Each relay posts to its own path, so the receiver knows which relay
	// has a batch in flight.
	relayYAML := "{lease_ttl: 3s, poll_interval: 200ms, batch_size: 500, backoff: {initial: 200ms, max: 2s}}"
	cfgA := e2eConfig(t, db, hookURL+"/a", natsURL, stream, prefix, relayYAML)
	cfgB := e2eConfig(t, db, hookURL+"/b", natsURL, stream, prefix, relayYAML)
	env := append(relayEnv(db, natsURL), "SEARCHSYNC_LOG_LEVEL=debug") // the queue logs every duplicate at debug

	aggs := make([]uuid.UUID, aggregates)
	for i := range aggs {
		aggs[i] = uuid.New()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	produced := make(chan error, 1)
	go func() { produced <- produce(ctx, t, db, aggs, events, 100, 10*time.Millisecond) }()

	a := startRelay(t, cfgA, "relay-a", env...)
	b := startRelay(t, cfgB, "relay-b", env...)

	// Once the queue holds a fifth of the events, the webhook holds every
	// request: the relays get stuck in batches that the queue has taken
	// (published, PubAck received) and the relay has not acknowledged. When
	// a relay is stuck and the stream has stopped growing, that relay is
	// killed and the webhook lets go; the other takes its partitions after
	// the lease expires and delivers its batch again.
	testenv.Eventually(t, 2*time.Minute, func() bool { return streamMsgs(t, natsURL, stream) >= events/5 },
		"the stream never reached %d messages", events/5)
	release := make(chan struct{})
	var releaseOnce sync.Once
	letGo := func() {
		releaseOnce.Do(func() {
			hook.mu.Lock()
			hook.held = nil
			hook.mu.Unlock()
			close(release)
		})
	}
	t.Cleanup(letGo) // before the receiver closes
	hook.mu.Lock()
	hook.held = release
	hook.mu.Unlock()
	var lastN uint64
	lastChange := time.Now()
	var victim *relayProc
	testenv.Eventually(t, time.Minute, func() bool {
		hook.mu.Lock()
		switch {
		case hook.active["/a"] > 0:
			victim = a
		case hook.active["/b"] > 0:
			victim = b
		}
		hook.mu.Unlock()
		if n := streamMsgs(t, natsURL, stream); n != lastN {
			lastN, lastChange = n, time.Now()
		}
		return victim != nil && time.Since(lastChange) > 500*time.Millisecond && lastN > uint64(counts(t, db).dispatched)
	}, "no relay got stuck with a batch between publish and ack")
	victim.signal(syscall.SIGKILL)
	<-victim.done
	letGo()
	t.Logf("%s killed with SIGKILL; stream held %d messages, %+v", victim.name, streamMsgs(t, natsURL, stream), counts(t, db))

	if err := <-produced; err != nil {
		t.Fatalf("producer: %v", err)
	}
	testenv.Eventually(t, 3*time.Minute, func() bool { return counts(t, db).dispatched == events },
		"not every event dispatched: %+v", counts(t, db))
	if c := counts(t, db); c.failed != 0 {
		t.Fatalf("failed events: %+v", c)
	}
	n := checkStream(t, db, natsURL, stream)
	if n != events {
		t.Fatalf("stream holds %d messages, want %d", n, events)
	}

	hook.mu.Lock()
	defer hook.mu.Unlock()
	if len(hook.count) != events {
		t.Errorf("webhook received %d distinct events, want %d", len(hook.count), events)
	}
	last := map[string]int64{}
	for _, id := range hook.first {
		if agg := hook.agg[id]; last[agg] > id {
			t.Errorf("webhook: aggregate %s: event %d first arrived after event %d", agg, id, last[agg])
		}
		last[hook.agg[id]] = id
	}
	dups := 0
	for _, p := range []*relayProc{a, b} {
		log, _ := os.ReadFile(p.log)
		dups += strings.Count(string(log), "duplicate dropped by the stream")
	}
	t.Logf("stream: %d messages for %d events, %d redeliveries to the queue dropped by the duplicate window; webhook: %d requests for %d events",
		n, events, dups, hook.requests, len(hook.count))
	if dups == 0 {
		t.Errorf("%s was killed with a batch in flight, yet nothing was redelivered to the queue", victim.name)
	}
}

// TestNatsOutage: NATS stopped for 20 s and started again while events keep
// coming; nothing fails, no attempts are counted, nothing is lost, order per
// aggregate holds.
func TestNatsOutage(t *testing.T) {
	t.Parallel()
	const events, aggregates = 3000, 100
	db := testenv.NewDB(t)
	srv := natstest.Start(t) // our own: we stop it
	stream, prefix := names(t)
	cfg := e2eConfig(t, db, "", srv.URL, stream, prefix,
		"{lease_ttl: 3s, poll_interval: 200ms, backoff: {initial: 500ms, max: 8s}}")
	aggs := make([]uuid.UUID, aggregates)
	for i := range aggs {
		aggs[i] = uuid.New()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	produced := make(chan error, 1)
	// About 40 s of production: 3000 events, 25 per transaction, 300 ms apart.
	go func() { produced <- produce(ctx, t, db, aggs, events, 25, 300*time.Millisecond) }()
	startRelay(t, cfg, "relay", relayEnv(db, srv.URL)...)

	testenv.Eventually(t, time.Minute, func() bool { return streamMsgs(t, srv.URL, stream) >= 300 }, "the stream never reached 300 messages")
	srv.Stop()
	stopped := time.Now()
	before := counts(t, db)
	time.Sleep(20 * time.Second) // the outage itself, not a wait for a condition
	during := counts(t, db)
	srv.Restart()
	t.Logf("NATS down for %s; at the stop %+v, at the restart %+v", time.Since(stopped).Round(time.Millisecond), before, during)
	if during.failed != 0 {
		t.Fatalf("events failed during the outage: %+v", during)
	}
	if during.pending == 0 {
		t.Errorf("expected pending events during the outage: %+v", during)
	}
	// An outage is not a failure of the events (docs/consumers.md): the consumer
	// pauses and attempts do not move. Only a batch in flight when the
	// server stopped, which delivered some events, may count one attempt
	// for the others.
	var most int
	db.Pool.QueryRow(context.Background(), `SELECT coalesce(max(attempts), 0) FROM aa_outbox_event`).Scan(&most)
	if most > 1 {
		t.Errorf("after %s of outage an event has %d attempts; an outage must not count attempts: %+v", 20*time.Second, most, during)
	}

	if err := <-produced; err != nil {
		t.Fatalf("producer: %v", err)
	}
	testenv.Eventually(t, 3*time.Minute, func() bool { return counts(t, db).dispatched == events },
		"not every event dispatched after the outage: %+v", counts(t, db))
	final := counts(t, db)
	if final.failed != 0 {
		t.Fatalf("failed events: %+v", final)
	}
	if n := checkStream(t, db, srv.URL, stream); n != events {
		t.Fatalf("stream holds %d messages, want %d", n, events)
	}
	var maxAttempts int
	var lastErr *string
	db.Pool.QueryRow(context.Background(), `SELECT attempts, last_error FROM aa_outbox_event ORDER BY attempts DESC LIMIT 1`).Scan(&maxAttempts, &lastErr)
	if lastErr != nil {
		t.Logf("after recovery: %d events had retries, most attempts %d, e.g. last_error %q", final.retried, maxAttempts, *lastErr)
	}
}
