package webhook

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/sink"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// The published Standard Webhooks test vector: a receiver using any Standard
// Webhooks library accepts what Sign produces.
func TestSignMatchesStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	key, err := ParseSecret(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	got := Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
	h := http.Header{}
	h.Set(HeaderID, "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set(HeaderTimestamp, "1614265330")
	h.Set(HeaderSignature, "v1,bm9wZQ== "+got)
	now := time.Unix(1614265330, 0).Add(time.Minute)
	if err := verify(testSecret, h, []byte(`{"test": 2432232314}`), now); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if err := verify(testSecret, h, []byte(`{"test": 2432232315}`), now); !errors.Is(err, ErrNoSignature) {
		t.Fatalf("tampered body: %v, want ErrNoSignature", err)
	}
	if err := verify(testSecret, h, []byte(`{"test": 2432232314}`), now.Add(10*time.Minute)); !errors.Is(err, ErrTimestamp) {
		t.Fatalf("old timestamp: %v, want ErrTimestamp", err)
	}
	h.Del(HeaderID)
	if err := verify(testSecret, h, nil, now); !errors.Is(err, ErrMissingHeaders) {
		t.Fatalf("missing header: %v, want ErrMissingHeaders", err)
	}
}

func TestParseSecret(t *testing.T) {
	t.Setenv("SEARCHSYNC_TEST_WEBHOOK_SECRET", "whsec_"+base64.StdEncoding.EncodeToString([]byte("k3y")))
	for _, tc := range []struct {
		secret, want, err string
	}{
		{secret: "whsec_" + base64.StdEncoding.EncodeToString([]byte("abc")), want: "abc"},
		{secret: "plain", want: "plain"},
		{secret: "env:SEARCHSYNC_TEST_WEBHOOK_SECRET", want: "k3y"},
		{secret: "env:SEARCHSYNC_TEST_WEBHOOK_UNSET", err: "environment variable SEARCHSYNC_TEST_WEBHOOK_UNSET is not set"},
		{secret: "file:" + secretFile(t, "from-a-file\n"), want: "from-a-file"},
		{secret: "file:/nonexistent/webhook-secret", err: "/nonexistent/webhook-secret"},
		{secret: "whsec_***", err: "base64"},
		{secret: "", err: "required"},
	} {
		key, err := ParseSecret(tc.secret)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseSecret(%q) error %v, want %q", tc.secret, err, tc.err)
		case tc.err == "" && (err != nil || string(key) != tc.want):
			t.Errorf("ParseSecret(%q) = %q, %v; want %q", tc.secret, key, err, tc.want)
		}
	}
	_, err := New("hook", Config{URL: "http://127.0.0.1:1/", Secret: "whsec_!"}, nil, nil)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Key != "webhook.secret" {
		t.Fatalf("New with a bad secret: %v, want a ConfigError on webhook.secret", err)
	}
	_, err = New("hook", Config{URL: "ftp://x", Secret: "s"}, nil, nil)
	if !errors.As(err, &ce) || ce.Key != "webhook.url" {
		t.Fatalf("New with a bad url: %v, want a ConfigError on webhook.url", err)
	}
}

// request is what the test receiver saw.
type request struct {
	header http.Header
	body   []byte
	msg    sink.Message
}

// receiver is a real HTTP endpoint that records every request and answers
// with respond (200 when nil).
type receiver struct {
	t       *testing.T
	srv     *httptest.Server
	mu      sync.Mutex
	reqs    []request
	respond func(w http.ResponseWriter, r request)
}

func newReceiver(t *testing.T, respond func(w http.ResponseWriter, r request)) *receiver {
	rc := &receiver{t: t, respond: respond}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		req := request{header: r.Header.Clone(), body: body}
		if err := json.Unmarshal(body, &req.msg); err != nil {
			t.Errorf("receiver: body is not a message: %v: %s", err, body)
		}
		rc.mu.Lock()
		rc.reqs = append(rc.reqs, req)
		rc.mu.Unlock()
		if rc.respond != nil {
			rc.respond(w, req)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) requests() []request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]request(nil), rc.reqs...)
}

func newConsumer(t *testing.T, url string, mod func(*Config)) *Consumer {
	t.Helper()
	cfg := Config{URL: url, Secret: testSecret, Timeout: 5 * time.Second, Concurrency: 4}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New("hook", cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// events builds n events for each of aggs aggregates, interleaved
// (a1e1, a2e1, …, a1e2, …), ids ascending.
func events(aggs, n int) []*outbox.Event {
	ids := make([]uuid.UUID, aggs)
	for i := range ids {
		ids[i] = uuid.New()
	}
	var out []*outbox.Event
	var id int64 = 100
	for j := range n {
		for i := range aggs {
			id++
			out = append(out, &outbox.Event{
				ID: id, EventType: "entity.customer.updated", SchemaVersion: 1, AggregateType: "DDM_ENTITY",
				AggregateID: &ids[i], Payload: json.RawMessage(fmt.Sprintf(`{"seq":%d}`, j)),
				CreatedAt: time.Now(),
			})
		}
	}
	return out
}

func TestDeliverSignsEveryRequest(t *testing.T) {
	t.Parallel()
	for _, secret := range []string{testSecret, "a-raw-secret"} {
		var bad atomic.Int32
		rc := newReceiver(t, func(w http.ResponseWriter, r request) {
			if err := Verify(secret, r.header, r.body); err != nil {
				bad.Add(1)
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
		c := newConsumer(t, rc.srv.URL, func(w *Config) { w.Secret = secret })
		evs := events(3, 2)
		evs = append(evs, &outbox.Event{ID: 999, EventType: "system.ping", AggregateType: "SYSTEM", Payload: json.RawMessage(`{}`)})
		for i, o := range c.Deliver(t.Context(), evs) {
			if o.Kind != delivery.OK {
				t.Fatalf("secret %q: event %d: %v %s", secret, evs[i].ID, o.Kind, o.Reason)
			}
		}
		if bad.Load() != 0 {
			t.Fatalf("secret %q: %d requests did not verify", secret, bad.Load())
		}
		reqs := rc.requests()
		if len(reqs) != len(evs) {
			t.Fatalf("receiver saw %d requests, want %d", len(reqs), len(evs))
		}
		for _, r := range reqs {
			if r.header.Get(HeaderID) != strconv.FormatInt(r.msg.ID, 10) {
				t.Fatalf("webhook-id %q for event %d", r.header.Get(HeaderID), r.msg.ID)
			}
			if ts, _ := strconv.ParseInt(r.header.Get(HeaderTimestamp), 10, 64); time.Since(time.Unix(ts, 0)).Abs() > time.Minute {
				t.Fatalf("webhook-timestamp %s is not now", r.header.Get(HeaderTimestamp))
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("content type %q", ct)
			}
			if r.msg.EventType == "" || r.msg.AggregateType == "" || len(r.msg.Payload) == 0 {
				t.Fatalf("incomplete message %s", r.body)
			}
		}
	}
}

func TestOutcomeMapping(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 5000)
	for _, tc := range []struct {
		status int
		header map[string]string
		body   string
		kind   delivery.Kind
		reason []string
		after  time.Duration
	}{
		{status: 200, kind: delivery.OK},
		{status: 201, kind: delivery.OK},
		{status: 204, kind: delivery.OK},
		{status: 408, kind: delivery.Unavailable, reason: []string{"408"}},
		{status: 429, header: map[string]string{"Retry-After": "30"}, kind: delivery.Unavailable, reason: []string{"429", "Retry-After 30s"}, after: 30 * time.Second},
		{status: 500, body: "boom\nwith lines", kind: delivery.Unavailable, reason: []string{"500", "boom with lines"}},
		{status: 502, kind: delivery.Unavailable, reason: []string{"502"}},
		{status: 503, header: map[string]string{"Retry-After": "120"}, kind: delivery.Unavailable, reason: []string{"503", "Retry-After 2m0s"}, after: 2 * time.Minute},
		{status: 504, header: map[string]string{"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, kind: delivery.Unavailable, reason: []string{"504", "Retry-After Wed, 21 Oct 2015"}},
		{status: 400, body: `{"error":"missing field"}`, kind: delivery.Poison, reason: []string{"400 Bad Request", `{"error":"missing field"}`}},
		{status: 401, kind: delivery.Unavailable, reason: []string{"401"}},
		{status: 403, body: "bad signature", kind: delivery.Unavailable, reason: []string{"403", "bad signature"}},
		{status: 404, kind: delivery.Poison, reason: []string{"404"}},
		{status: 410, kind: delivery.Poison, reason: []string{"410"}},
		{status: 422, body: long, kind: delivery.Poison, reason: []string{"422", "xxx…"}},
		{status: 301, header: map[string]string{"Location": "http://elsewhere/"}, kind: delivery.Poison, reason: []string{"301", "http://elsewhere/"}},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(t, func(w http.ResponseWriter, r request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			})
			c := newConsumer(t, rc.srv.URL, nil)
			evs := events(1, 2)
			out := c.Deliver(t.Context(), evs)
			if out[0].Kind != tc.kind {
				t.Fatalf("status %d: kind %v (%s), want %v", tc.status, out[0].Kind, out[0].Reason, tc.kind)
			}
			for _, s := range tc.reason {
				if !strings.Contains(out[0].Reason, s) {
					t.Fatalf("status %d: reason %q does not contain %q", tc.status, out[0].Reason, s)
				}
			}
			if out[0].RetryAfter != tc.after {
				t.Fatalf("status %d: RetryAfter %s, want %s", tc.status, out[0].RetryAfter, tc.after)
			}
			if len(out[0].Reason) > snippetLen+100 {
				t.Fatalf("reason is not bounded: %d bytes", len(out[0].Reason))
			}
			// The aggregate's second event is tried only after a success.
			want := delivery.NotAttempted
			if tc.kind == delivery.OK {
				want = delivery.OK
			}
			if out[1].Kind != want {
				t.Fatalf("second event: %v, want %v", out[1].Kind, want)
			}
		})
	}
}

func TestCancelledContextIsNotAttempted(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r request) {
		started <- struct{}{}
		<-release
	})
	t.Cleanup(func() { close(release) })
	c := newConsumer(t, rc.srv.URL, nil)
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-started; cancel() }()
	out := c.Deliver(ctx, events(1, 2))
	if out[0].Kind != delivery.NotAttempted || out[1].Kind != delivery.NotAttempted {
		t.Fatalf("cancelled delivery: %v, %v; want not attempted (the row stays as it is)", out[0], out[1])
	}
}

// The endpoint never sees more than Concurrency requests at once, even with
// two Deliver calls in parallel, and does see that many (aggregates run
// concurrently).
func TestConcurrencyBound(t *testing.T) {
	t.Parallel()
	const limit = 3
	var inflight, peak atomic.Int32
	rc := newReceiver(t, func(w http.ResponseWriter, r request) {
		n := inflight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		// Hold the request until the bound is reached (or briefly, for the
		// tail of the batch), so that overlap is certain.
		deadline := time.Now().Add(300 * time.Millisecond)
		for inflight.Load() < limit && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		inflight.Add(-1)
		w.WriteHeader(http.StatusOK)
	})
	c := newConsumer(t, rc.srv.URL, func(w *Config) { w.Concurrency = limit })
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for _, o := range c.Deliver(t.Context(), events(12, 2)) {
				if o.Kind != delivery.OK {
					t.Errorf("outcome %v %s", o.Kind, o.Reason)
				}
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p != limit {
		t.Fatalf("peak requests in flight %d, want exactly %d", p, limit)
	}
	if n := len(rc.requests()); n != 48 {
		t.Fatalf("receiver saw %d requests, want 48", n)
	}
}

// Per aggregate the receiver sees the events in id order, one at a time; a
// failure stops its aggregate (the rest NotAttempted, never sent) while the
// other aggregates go on.
func TestOrderPerAggregate(t *testing.T) {
	t.Parallel()
	evs := events(6, 10)
	failing := *evs[0].AggregateID // aggregate 0 fails at its 4th event (seq 3)
	var (
		mu   sync.Mutex
		busy = map[uuid.UUID]bool{}
	)
	rc := newReceiver(t, func(w http.ResponseWriter, r request) {
		agg := *r.msg.AggregateID
		mu.Lock()
		if busy[agg] {
			t.Errorf("two requests of aggregate %s in flight at once", agg)
		}
		busy[agg] = true
		mu.Unlock()
		time.Sleep(time.Millisecond) // widen the window in which overlap would show
		mu.Lock()
		busy[agg] = false
		mu.Unlock()
		if agg == failing && strings.Contains(string(r.msg.Payload), `"seq":3`) {
			w.WriteHeader(http.StatusInternalServerError) // the event's own failure: the batch goes on
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	c := newConsumer(t, rc.srv.URL, func(w *Config) { w.Concurrency = 4 })
	out := c.Deliver(t.Context(), evs)

	seen := map[uuid.UUID][]int64{}
	for _, r := range rc.requests() {
		seen[*r.msg.AggregateID] = append(seen[*r.msg.AggregateID], r.msg.ID)
	}
	for agg, ids := range seen {
		for i := 1; i < len(ids); i++ {
			if ids[i] <= ids[i-1] {
				t.Fatalf("aggregate %s: arrival order %v is not id order", agg, ids)
			}
		}
		want := 10
		if agg == failing {
			want = 4
		}
		if len(ids) != want {
			t.Fatalf("aggregate %s: receiver saw %d events, want %d", agg, len(ids), want)
		}
	}
	seq := map[uuid.UUID]int{}
	for i, e := range evs {
		n := seq[*e.AggregateID]
		seq[*e.AggregateID]++
		want := delivery.OK
		if *e.AggregateID == failing {
			switch {
			case n == 3:
				want = delivery.Unavailable
			case n > 3:
				want = delivery.NotAttempted
			}
		}
		if out[i].Kind != want {
			t.Fatalf("event %d (aggregate seq %d): %v %q, want %v", e.ID, n, out[i].Kind, out[i].Reason, want)
		}
	}
}
