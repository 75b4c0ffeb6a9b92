package relay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/relay"
	"github.com/searchsync/searchsync/sink"
)

// receiver is a real HTTP endpoint that records what arrives.
type receiver struct {
	URL string

	mu       sync.Mutex
	first    map[string][]int64 // aggregate key (or "" ) -> event ids in order of first arrival
	count    map[int64]int      // deliveries per event id
	arrivals map[int64][]time.Time
	status   func(m sink.Message) int // answer per message; nil: 200
	delay    time.Duration            // before answering
	requests []request                // every request, in order of arrival
}

// request is one request as it arrived: the event and the fencing token of
// its headers (partition -1: no header).
type request struct {
	id        int64
	partition int
	epoch     int64
	at        time.Time
}

func newReceiver(t testing.TB) *receiver {
	rc := &receiver{first: map[string][]int64{}, count: map[int64]int{}, arrivals: map[int64][]time.Time{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var m sink.Message
		if err := json.Unmarshal(body, &m); err != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		st := http.StatusOK
		if rc.status != nil {
			st = rc.status(m)
		}
		rc.arrivals[m.ID] = append(rc.arrivals[m.ID], time.Now())
		req := request{id: m.ID, partition: -1, at: time.Now()}
		if v := r.Header.Get(sink.HeaderPartition); v != "" {
			req.partition, _ = strconv.Atoi(v)
			req.epoch, _ = strconv.ParseInt(r.Header.Get(sink.HeaderLeaseEpoch), 10, 64)
		}
		rc.requests = append(rc.requests, req)
		if st < 300 {
			if rc.count[m.ID] == 0 {
				key := ""
				if m.AggregateID != nil {
					key = m.AggregateType + "/" + m.AggregateID.String()
				}
				rc.first[key] = append(rc.first[key], m.ID)
			}
			rc.count[m.ID]++
		}
		delay := rc.delay
		rc.mu.Unlock()
		time.Sleep(delay)
		w.WriteHeader(st)
		fmt.Fprintf(w, "answer %d", st)
	}))
	t.Cleanup(srv.Close)
	rc.URL = srv.URL
	return rc
}

func (rc *receiver) setStatus(f func(m sink.Message) int) {
	rc.mu.Lock()
	rc.status = f
	rc.mu.Unlock()
}

// distinct is the number of events delivered at least once.
func (rc *receiver) distinct() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.count)
}

func (rc *receiver) delivered(id int64) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.count[id] > 0
}

func (rc *receiver) attemptTimes(id int64) []time.Time {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]time.Time(nil), rc.arrivals[id]...)
}

// checkOrder fails the test for every aggregate whose first deliveries are
// not in id order.
func (rc *receiver) checkOrder(t testing.TB) {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	bad := 0
	for key, ids := range rc.first {
		if key == "" {
			continue
		}
		for i := 1; i < len(ids); i++ {
			if ids[i] < ids[i-1] {
				if bad < 5 {
					t.Errorf("aggregate %s: event %d first delivered after %d", key, ids[i], ids[i-1])
				}
				bad++
				break
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d aggregates out of order", bad)
	}
}

// hook is the minimal webhook consumer of the tests: a JSON POST per event,
// aggregates in parallel, each aggregate in order; 2xx ok, 408/429/5xx and
// network errors retry, other 4xx poison.
type hook struct {
	name   string
	url    string
	client *http.Client
	// outages: network errors, 429 and 5xx are Unavailable (as the real
	// webhook consumer says), not Retry.
	outages bool
	// epochs records the lease token of every request sent (partition ->
	// epochs in order).
	mu     sync.Mutex
	tokens []token
}

type token struct {
	id            int64
	part          int
	epoch         int64
	ok            bool
	leaseRejected bool
}

func newHook(name, url string) *hook {
	return &hook{name: name, url: url, client: &http.Client{Timeout: 5 * time.Second}}
}

func (h *hook) Name() string { return h.name }

func (h *hook) Deliver(ctx context.Context, events []*outbox.Event) []delivery.Outcome {
	out := make([]delivery.Outcome, len(events))
	groups := map[string][]int{}
	for i, e := range events {
		key := e.AggregateKey()
		if key == "" {
			key = fmt.Sprint(e.ID)
		}
		groups[key] = append(groups[key], i)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, idx := range groups {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			for _, i := range idx {
				out[i] = h.post(ctx, events[i])
				if !out[i].Kind.Delivered() {
					return
				}
			}
		})
	}
	wg.Wait()
	return out
}

func (h *hook) post(ctx context.Context, e *outbox.Event) delivery.Outcome {
	body, err := sink.Body(e)
	if err != nil {
		return delivery.Poisonf("%v", err)
	}
	if err := delivery.CheckLease(ctx); err != nil {
		h.mu.Lock()
		h.tokens = append(h.tokens, token{id: e.ID, leaseRejected: true})
		h.mu.Unlock()
		return delivery.Outcome{Reason: err.Error()}
	}
	if l, ok := delivery.LeaseOf(ctx); ok {
		p, ep, ok := l.Token(e)
		h.mu.Lock()
		h.tokens = append(h.tokens, token{id: e.ID, part: p, epoch: ep, ok: ok})
		h.mu.Unlock()
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	resp, err := h.client.Do(req)
	if err != nil {
		if h.outages {
			return delivery.Unavailablef("%v", err)
		}
		return delivery.Retryf("%v", err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch s := resp.StatusCode; {
	case s < 300:
		return delivery.Ok()
	case h.outages && (s == 429 || s >= 500):
		return delivery.Unavailablef("HTTP %d: %s", s, msg)
	case s == 408 || s == 429 || s >= 500:
		return delivery.Retryf("HTTP %d: %s", s, msg)
	default:
		return delivery.Poisonf("HTTP %d: %s", s, msg)
	}
}

// poisonBroken answers 422 (poison) to entity.customer.broken, 200 to the
// rest: a receiver's status for tests of a failed head.
func poisonBroken(m sink.Message) int {
	if m.EventType == "entity.customer.broken" {
		return http.StatusUnprocessableEntity
	}
	return http.StatusOK
}

// start runs a relay until the test ends; stop stops it early and waits.
func start(t testing.TB, db *testenv.DB, cfg relay.Config) (r *relay.Relay, stop func()) {
	t.Helper()
	cfg.Schema = db.Schema
	r, err := relay.New(db.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("relay.Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("relay did not stop within 30s")
			}
		})
	}
	t.Cleanup(stop)
	return r, stop
}

// fast is a relay configuration for tests: short intervals.
func fast() relay.Config {
	return relay.Config{Partitions: 8, BatchSize: 100, PollInterval: 200 * time.Millisecond, LeaseTTL: 1500 * time.Millisecond}
}

func event(agg *uuid.UUID, eventType, aggType string, n int) outbox.Event {
	p, _ := json.Marshal(map[string]any{"n": n, "version": n})
	return outbox.Event{EventType: eventType, AggregateType: aggType, AggregateID: agg, Payload: p}
}

func write(t testing.TB, db *testenv.DB, events ...outbox.Event) []int64 {
	t.Helper()
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})
	var ids []int64
	err := pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
		var err error
		ids, err = w.Write(context.Background(), tx, events...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

type row struct {
	Status      string
	Attempts    int
	LastError   *string
	AvailableAt time.Time
	Dispatched  *time.Time
}

func getRow(t testing.TB, db *testenv.DB, id int64) row {
	t.Helper()
	var r row
	if err := db.Pool.QueryRow(context.Background(), `SELECT status::text, attempts, last_error, available_at, dispatched_at FROM aa_outbox_event WHERE id = $1`, id).
		Scan(&r.Status, &r.Attempts, &r.LastError, &r.AvailableAt, &r.Dispatched); err != nil {
		t.Fatal(err)
	}
	return r
}

func countStatus(t testing.TB, db *testenv.DB, status string) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM aa_outbox_event WHERE status::text = $1`, status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
