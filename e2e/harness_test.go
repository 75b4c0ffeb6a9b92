package e2e_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/internal/loadgen"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/sink"
	"github.com/searchsync/searchsync/sink/nats/natstest"
	"github.com/searchsync/searchsync/sink/webhook"
)

// binary is searchsync, built once for every package that runs it
// (testenv.Binary).
var binary string

func TestMain(m *testing.M) { testenv.MainWithBinary(m, &binary) }

const secret = "whsec_dGVzdC1zZWNyZXQtdGVzdC1zZWNyZXQ="

// endpoint is a real webhook receiver: it checks signatures and records, per
// event, how often it arrived and in which order events first arrived per
// aggregate.
type endpoint struct {
	URL   string
	mu    sync.Mutex
	count map[int64]int
	first map[int64]time.Time // when each event first arrived
	order map[string][]int64
	noTok int
}

func newEndpoint(t *testing.T) *endpoint {
	ep := &endpoint{count: map[int64]int{}, first: map[int64]time.Time{}, order: map[string][]int64{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify(secret, r.Header, body); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var m sink.Message
		if err := json.Unmarshal(body, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ep.mu.Lock()
		if r.Header.Get(sink.HeaderLeaseEpoch) == "" {
			ep.noTok++
		}
		if ep.count[m.ID] == 0 && m.AggregateID != nil {
			ep.order[m.AggregateID.String()] = append(ep.order[m.AggregateID.String()], m.ID)
		}
		if ep.count[m.ID] == 0 {
			ep.first[m.ID] = time.Now()
		}
		ep.count[m.ID]++
		ep.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	ep.URL = srv.URL
	return ep
}

func (ep *endpoint) has(ids []int64) bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	for _, id := range ids {
		if ep.count[id] == 0 {
			return false
		}
	}
	return true
}

// outOfOrder counts aggregates whose events first arrived out of id order.
// It also returns up to five of them, each with its events' ids in the
// order they first arrived.
func (ep *endpoint) outOfOrder() (int, []string) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	bad := 0
	var which []string
	for agg, ids := range ep.order {
		for i := 1; i < len(ids); i++ {
			if ids[i] < ids[i-1] {
				if bad < 5 {
					which = append(which, fmt.Sprintf("%s: %v", agg, ids))
				}
				bad++
				break
			}
		}
	}
	return bad, which
}

// duplicatesOutside counts the events that arrived more than once and
// whose first arrival was not within the window around one of cuts: a
// request the endpoint answered while its connection was cut (an outage
// beginning) is sent again, as at-least-once delivery must. The window
// reaches 5 s past the cut as well: a request whose bytes were in the
// endpoint's socket when the connection was cut is read and recorded after
// the cut (on a loaded machine, seconds after), while no new request can
// arrive during the outage (the proxy's listener and connections are
// closed). It returns how many, and up to five of them as "id at +offset".
func (ep *endpoint) duplicatesOutside(window time.Duration, cuts ...time.Time) (int, []string) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	const afterCut = 5 * time.Second
	n := 0
	var which []string
	for id, c := range ep.count {
		if c < 2 {
			continue
		}
		at := ep.first[id]
		if !slices.ContainsFunc(cuts, func(cut time.Time) bool { return at.Sub(cut) <= afterCut && cut.Sub(at) <= window }) {
			n += c - 1
			if len(which) < 5 && len(cuts) > 0 {
				which = append(which, fmt.Sprintf("%d first at %+.3fs from the cut, %d times", id, at.Sub(cuts[0]).Seconds(), c))
			}
		}
	}
	return n, which
}

func (ep *endpoint) duplicates() int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	n := 0
	for _, c := range ep.count {
		n += c - 1
	}
	return n
}

// world is one test's services and configuration.
type world struct {
	t        *testing.T
	db       *testenv.DB
	alias    string
	engine   *testenv.TCPProxy
	engineIx string // the physical index, read directly to compare versions
	hook     *endpoint
	hookNet  *testenv.TCPProxy
	nats     *natstest.Server
	stream   string
	cfg      string
	listen   string // the HTTP listener of the (first) relay: /metrics

	// slots: the HTTP listener of each further relay of a test (slot 1, 2,
	// …), kept across its restarts; relays of one test must not share one.
	slots map[int]string

	mu         sync.Mutex
	rows       []outboxRow // what committed read of the outbox so far
	streamCons jetstream.Consumer
	streamSeen map[int64]int
	// natsDown: the test stopped the NATS server (the stream's reader
	// would wait for it); the queue then counts as behind.
	natsDown atomic.Bool
}

// newWorld prepares the services and writes a configuration that routes
// the customer events to the search consumer, a webhook and NATS; relay is
// the configuration's relay section (empty: the defaults).
func newWorld(t *testing.T, relay string) *world {
	w := &world{t: t, db: testenv.NewDB(t), alias: testenv.Name("e2e")}
	t.Cleanup(w.dumpOnFailure) // before the schema is dropped
	eng, err := url.Parse(testenv.EngineURL(t))
	if err != nil {
		t.Fatal(err)
	}
	w.engine = testenv.NewTCPProxy(t, eng.Host)
	w.engineIx = mapping.PhysicalName(w.alias, 1)
	t.Cleanup(func() {
		req, _ := http.NewRequest(http.MethodDelete, testenv.EngineURL(t)+"/"+w.engineIx, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	w.hook = newEndpoint(t)
	hu, _ := url.Parse(w.hook.URL)
	w.hookNet = testenv.NewTCPProxy(t, hu.Host)
	w.nats = natstest.Start(t)
	w.stream = strings.ToUpper(w.alias)

	listen := testenv.FreeAddr(t)
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "defs"), 0o755)
	def, err := os.ReadFile("../mapping/defs/customers.json")
	if err != nil {
		t.Fatal(err)
	}
	def = bytes.Replace(def, []byte(`"alias": "customers"`), []byte(`"alias": "`+w.alias+`"`), 1)
	os.WriteFile(filepath.Join(dir, "defs", w.alias+".json"), def, 0o644)
	// The example's projection on the payloads as loadgen writes them
	// (schema_version 1; the example's upcaster is Go code of its own).
	proj := strings.Replace(string(customer.ProjectionFile()), "index: customers", "index: "+w.alias, 1)
	proj = strings.Replace(proj, "schema_version: 2", "schema_version: 1", 1)
	os.WriteFile(filepath.Join(dir, "projections.yaml"), []byte(proj), 0o644)
	cfg := fmt.Sprintf(`database: {url: %q, schema: %s}
relay:
%s
engine: {kind: opensearch, urls: ["http://%s"]}
indexes: {definitions: defs, projections: [projections.yaml]}
http: {listen: %q}
log: {level: %s, format: json}
compaction: {interval: -1s}
consumers:
  - {name: search, type: search, search: {indexes: [%s]}}
  - {name: hook, type: webhook, webhook: {url: "http://%s/", secret: %q, concurrency: 8, timeout: 60s}}
  - {name: queue, type: nats, nats: {url: %q, stream: %s, subject: "e2e.{aggregate_type}.{event_type}", create_stream: true}}
routes:
  - {consumer: search, event_types: ["entity.customer.*"]}
  - {consumer: hook, event_types: ["entity.customer.*"]}
  - {consumer: queue, event_types: ["entity.customer.*"]}
`, w.db.URL, w.db.Schema, relay, w.engine.Addr, listen, cmp.Or(os.Getenv("SEARCHSYNC_E2E_LOG_LEVEL"), "info"), w.alias, w.hookNet.Addr, secret, w.nats.URL, w.stream)
	w.listen = listen
	w.cfg = filepath.Join(dir, "searchsync.yaml")
	if err := os.WriteFile(w.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return w
}

// proc is one `searchsync run`.
type proc struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
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

func (b *syncBuffer) Truncate(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.Buffer.Truncate(n)
}

// ownStacks keeps the goroutines of a Go stack dump that run searchsync's
// own code, at most 24 kB of them.
func ownStacks(dump string) string {
	var b strings.Builder
	for _, g := range strings.Split(dump, "\n\n") {
		if strings.Contains(g, "github.com/searchsync/searchsync/") && b.Len() < 24000 {
			b.WriteString(g)
			b.WriteString("\n\n")
		}
	}
	return b.String()
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Buffer.String()
}

func (w *world) run(name string) *proc {
	w.t.Helper()
	return w.runSlot(0, name)
}

// runSlot starts relay number slot of the test: slot 0 listens on the
// configuration's http.listen (w.listen), every other slot on an address of
// its own, the same across restarts. Relays that shared one listener would
// not run together: all but the first would stop at start-up, unable to
// bind it.
func (w *world) runSlot(slot int, name string) *proc {
	w.t.Helper()
	listen := w.listen
	if slot > 0 {
		if w.slots == nil {
			w.slots = map[int]string{}
		}
		if w.slots[slot] == "" {
			w.slots[slot] = testenv.FreeAddr(w.t)
		}
		listen = w.slots[slot]
	}
	p := &proc{cmd: exec.Command(binary, "run", "-c", w.cfg), log: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "DATABASE_URL=", "SEARCHSYNC_CONFIG=", "SEARCHSYNC_HTTP_LISTEN="+listen, "SEARCHSYNC_ENGINE_URL=", "SEARCHSYNC_NATS_URL=")
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	w.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			if w.t.Failed() {
				// A relay still running when the test failed: its
				// goroutines' stacks (SIGQUIT) say where it waits.
				before := len(p.log.String())
				p.cmd.Process.Signal(syscall.SIGQUIT)
				select {
				case <-p.done:
				case <-time.After(5 * time.Second):
				}
				if s := p.log.String(); len(s) > before {
					w.t.Logf("--- goroutines of %s in searchsync's code when the test failed:\n%s", name, ownStacks(s[before:]))
					p.log.Truncate(before) // the log below ends where the test failed
				}
			}
			p.cmd.Process.Kill()
			<-p.done
		}
		if dir := os.Getenv("SEARCHSYNC_E2E_LOGS"); dir != "" {
			file := filepath.Join(dir, strings.NewReplacer("/", "_").Replace(w.t.Name())+"-"+name+".log")
			if err := os.WriteFile(file, []byte(p.log.String()), 0o644); err != nil {
				w.t.Errorf("keep the log of %s: %v", name, err)
			}
		}
		if w.t.Failed() {
			s := p.log.String()
			w.t.Logf("--- log of %s (last 16000 bytes):\n%s", name, s[max(0, len(s)-16000):])
		}
	})
	return p
}

// produce writes realistic customer mutations (creates, partial updates,
// deletes, bursts) at about rate events/s until the returned stop is called.
func (w *world) produce(rate int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := loadgen.Steady(ctx, w.db.Pool, outbox.NewWriter(outbox.WriterConfig{Schema: w.db.Schema}),
			loadgen.New(uint64(time.Now().UnixNano())), rate, 5, 3*time.Second, 20)
		done <- err
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				w.t.Errorf("producer: %v", err)
			}
		})
	}
	w.t.Cleanup(stop)
	return stop
}

// committed is what the outbox holds of the events created before t: their
// ids, and the highest version per aggregate. Rows are read once and kept
// (the outbox only grows during a test); each call reads the rows after the
// last one older than 10 s, so that a transaction that took an id earlier
// but committed later is not missed.
func (w *world) committed(t time.Time) (ids []int64, versions map[uuid.UUID]int64) {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	from := int64(0)
	for i := len(w.rows) - 1; i >= 0; i-- {
		if w.rows[i].created.Before(time.Now().Add(-10 * time.Second)) {
			from = w.rows[i].id
			break
		}
	}
	rows, err := w.db.Pool.Query(context.Background(),
		`SELECT id, aggregate_id, (payload->>'version')::bigint, created_at FROM aa_outbox_event WHERE id > $1 ORDER BY id`, from)
	if err != nil {
		w.t.Fatal(err)
	}
	kept := w.rows[:0:0]
	for _, r := range w.rows {
		if r.id <= from {
			kept = append(kept, r)
		}
	}
	for rows.Next() {
		var r outboxRow
		if err := rows.Scan(&r.id, &r.agg, &r.version, &r.created); err != nil {
			w.t.Fatal(err)
		}
		kept = append(kept, r)
	}
	rows.Close()
	w.rows = kept
	versions = map[uuid.UUID]int64{}
	for _, r := range w.rows {
		if r.created.Before(t) {
			ids = append(ids, r.id)
			versions[r.agg] = max(versions[r.agg], r.version)
		}
	}
	return ids, versions
}

type outboxRow struct {
	id, version int64
	agg         uuid.UUID
	created     time.Time
}

// indexVersions reads the version of every document of the physical index
// (tombstones included) straight from the engine, with a scroll (the soak
// holds more documents than one search returns).
func (w *world) indexVersions() map[uuid.UUID]int64 {
	base := testenv.EngineURL(w.t)
	type page struct {
		ScrollID string `json:"_scroll_id"`
		Hits     struct {
			Hits []struct {
				ID      string `json:"_id"`
				Version int64  `json:"_version"`
			} `json:"hits"`
		} `json:"hits"`
	}
	get := func(url, body string) (*page, error) {
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s: %s", url, resp.Status)
		}
		var p page
		return &p, json.NewDecoder(resp.Body).Decode(&p)
	}
	out := map[uuid.UUID]int64{}
	p, err := get(base+"/"+w.engineIx+"/_search?scroll=1m",
		`{"size": 5000, "version": true, "_source": false, "sort": ["_doc"], "query": {"match_all": {}}}`)
	for err == nil && len(p.Hits.Hits) > 0 {
		for _, h := range p.Hits.Hits {
			if id, err := uuid.Parse(h.ID); err == nil {
				out[id] = h.Version
			}
		}
		id, _ := json.Marshal(p.ScrollID)
		p, err = get(base+"/_search/scroll", `{"scroll": "1m", "scroll_id": `+string(id)+`}`)
	}
	if err != nil {
		return nil
	}
	if p != nil && p.ScrollID != "" {
		req, _ := http.NewRequest(http.MethodDelete, base+"/_search/scroll/"+p.ScrollID, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	return out
}

// streamIDs counts the messages of the stream per event id. One ordered
// consumer reads the stream as it grows (the soak stores more than can be
// read anew on every check).
func (w *world) streamIDs() map[int64]int {
	if w.natsDown.Load() {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.streamCons == nil {
		nc, err := natsgo.Connect(w.nats.URL, natsgo.MaxReconnects(-1))
		if err != nil {
			return nil
		}
		w.t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			return nil
		}
		c, err := js.OrderedConsumer(context.Background(), w.stream, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return nil
		}
		w.streamCons, w.streamSeen = c, map[int64]int{}
	}
	for {
		batch, err := w.streamCons.Fetch(2000, jetstream.FetchMaxWait(300*time.Millisecond))
		if err != nil {
			return nil
		}
		n := 0
		for m := range batch.Messages() {
			id, _ := strconv.ParseInt(m.Headers().Get("Nats-Msg-Id"), 10, 64)
			w.streamSeen[id]++
			n++
		}
		if batch.Error() != nil || n < 2000 {
			break
		}
	}
	return w.streamSeen
}

// natstestRead reads the bodies of every message in the stream, in stream
// order.
func natstestRead(w *world) ([][]byte, error) {
	msgs, err := natstest.ReadStream(context.Background(), w.nats.URL, w.stream)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		out[i] = m.Data
	}
	return out, nil
}

// metric reads one sample of the relay's /metrics: the value of the first
// line that starts with name and contains every label (k="v").
func (w *world) metric(name string, labels ...string) (float64, bool) {
	resp, err := http.Get("http://" + w.listen + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		return v, err == nil
	}
	return 0, false
}

// behind names the consumers that do not hold everything committed before t.
func (w *world) behind(t time.Time) []string {
	ids, versions := w.committed(t)
	var out []string
	if !w.hook.has(ids) {
		out = append(out, "hook")
	}
	iv := w.indexVersions()
	for agg, v := range versions {
		if iv[agg] < v {
			out = append(out, "search")
			break
		}
	}
	if s := w.streamIDs(); s != nil {
		for _, id := range ids {
			if s[id] == 0 {
				out = append(out, "queue")
				break
			}
		}
	} else {
		out = append(out, "queue")
	}
	return out
}

func without(list []string, name string) []string {
	var out []string
	for _, s := range list {
		if s != name {
			out = append(out, s)
		}
	}
	return out
}

func (w *world) count(q string, args ...any) int {
	w.t.Helper()
	var n int
	if err := w.db.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		w.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// dumpOnFailure logs, for a failed test, what the outbox and the delivery
// rows hold, so that a consumer found behind can be told apart: events
// pending or held, delivery rows by state, pause states.
func (w *world) dumpOnFailure() {
	if !w.t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, q := range []string{
		`SELECT status::text, (available_at = ` + outbox.HeldSQL + `)::text AS held, count(*)::text FROM aa_outbox_event GROUP BY 1, 2 ORDER BY 1, 2`,
		`SELECT consumer, state::text, (available_at = ` + outbox.HeldSQL + `)::text AS held, (available_at > now())::text AS later, count(*)::text FROM aa_outbox_delivery GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4`,
		`SELECT consumer, state::text, coalesce(reason, ''), probes::text, coalesce(probe_at::text, '') FROM aa_outbox_consumer ORDER BY 1`,
		`SELECT id::text, status::text, attempts::text, available_at::text, coalesce(left(last_error, 200), '') FROM aa_outbox_event WHERE status <> 'dispatched' ORDER BY id LIMIT 5`,
		`SELECT coalesce(owner, ''), count(*)::text FROM aa_relay_lease GROUP BY 1`,
	} {
		rows, err := w.db.Pool.Query(ctx, q)
		if err != nil {
			w.t.Logf("dump: %s: %v", q, err)
			continue
		}
		var out []string
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				break
			}
			out = append(out, fmt.Sprint(vals...))
		}
		rows.Close()
		w.t.Logf("dump: %s\n  %s", q, strings.Join(out, "\n  "))
	}
}
