package webhook

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/sink"
)

// countingClient dials through a dialer that counts the connections the
// consumer tries to open.
func countingClient(dials *atomic.Int32) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		},
	}}
}

// checkOutage asserts the outcomes of a batch sent while the endpoint is
// down: sent aggregate heads are Unavailable with a reason containing want,
// at most sent of them and at least one; the heads not sent are
// NotAttempted with "not sent: " and the same reason; later events of an
// aggregate NotAttempted.
func checkOutage(t *testing.T, evs []*outbox.Event, out []delivery.Outcome, want string, sent int) {
	t.Helper()
	head := map[uuid.UUID]bool{}
	unavailable := 0
	for i, e := range evs {
		o := out[i]
		switch {
		case head[*e.AggregateID]:
			if o.Kind != delivery.NotAttempted {
				t.Fatalf("event %d after its aggregate's head: %v %q, want not attempted", e.ID, o.Kind, o.Reason)
			}
		case o.Kind == delivery.Unavailable && strings.Contains(o.Reason, want):
			unavailable++
		case o.Kind == delivery.NotAttempted && strings.HasPrefix(o.Reason, "not sent: the endpoint failed earlier in this batch: ") && strings.Contains(o.Reason, want):
		default:
			t.Fatalf("event %d: %v %q, want unavailable or not sent (%q)", e.ID, o.Kind, o.Reason, want)
		}
		head[*e.AggregateID] = true
	}
	if unavailable < 1 || unavailable > sent {
		t.Fatalf("%d events unavailable, want 1..%d (the rest not sent)", unavailable, sent)
	}
}

// An endpoint that refuses connections: with one request at a time only the
// first event is tried (Unavailable); every other aggregate's head is not
// sent (NotAttempted, the reason saying why), so that its attempts cannot
// move; with more concurrency at most that many are tried.
func TestRefusedEndpointIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens any more
	for _, conc := range []int{1, 4} {
		var dials atomic.Int32
		c, err := New("hook", Config{URL: url, Secret: testSecret, Timeout: 5 * time.Second, Concurrency: conc}, countingClient(&dials), nil)
		if err != nil {
			t.Fatal(err)
		}
		evs := events(10, 2)
		out := c.Deliver(t.Context(), evs)
		checkOutage(t, evs, out, "refused", conc)
		if n := dials.Load(); n < 1 || int(n) > conc {
			t.Fatalf("concurrency %d: %d connection attempts for one Deliver call, want 1..%d", conc, n, conc)
		}
	}
}

// 503 and 429 say the endpoint as a whole is down or overloaded: after the
// first, the rest of the batch is not sent, and the Retry-After is kept.
// (Unavailable for the one sent, with nothing delivered: the relay pauses.)
func TestOverloadedEndpointIsUnavailable(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		rc := newReceiver(t, func(w http.ResponseWriter, r request) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(status)
		})
		c := newConsumer(t, rc.srv.URL, func(w *Config) { w.Concurrency = 1 })
		evs := events(5, 3)
		out := c.Deliver(t.Context(), evs)
		checkOutage(t, evs, out, strconv.Itoa(status), 1)
		for i, o := range out {
			if o.Kind == delivery.Unavailable && o.RetryAfter != 7*time.Second {
				t.Fatalf("status %d, event %d: RetryAfter %s, want 7s", status, evs[i].ID, o.RetryAfter)
			}
		}
		if n := len(rc.requests()); n != 1 {
			t.Fatalf("status %d: receiver saw %d requests in one Deliver call, want 1", status, n)
		}
		for _, o := range out {
			if o.Suspect {
				t.Errorf("status %d: outcome marked Suspect; the endpoint as a whole is down", status)
			}
		}
	}
}

// A 500 for one event while the others get 200: that one is Unavailable and
// Suspect (the relay counts it as that event's retry, since the consumer
// delivered others), the others are delivered: a 500 does not stop the batch.
func TestOne500AmongSuccesses(t *testing.T) {
	t.Parallel()
	evs := events(6, 1)
	bad := evs[0].ID
	rc := newReceiver(t, func(w http.ResponseWriter, r request) {
		if r.msg.ID == bad {
			http.Error(w, "cannot handle this one", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	c := newConsumer(t, rc.srv.URL, func(w *Config) { w.Concurrency = 1 })
	out := c.Deliver(t.Context(), evs)
	for i, o := range out {
		want := delivery.OK
		if evs[i].ID == bad {
			want = delivery.Unavailable
		}
		if o.Kind != want {
			t.Fatalf("event %d: %v %q, want %v", evs[i].ID, o.Kind, o.Reason, want)
		}
	}
	if !strings.Contains(out[0].Reason, "500") || !strings.Contains(out[0].Reason, "cannot handle this one") {
		t.Fatalf("reason %q", out[0].Reason)
	}
	if !out[0].Suspect {
		t.Error("a 500 to one request is not marked Suspect (it may be the event's own doing)")
	}
	if n := len(rc.requests()); n != len(evs) {
		t.Fatalf("receiver saw %d requests, want %d", n, len(evs))
	}
}

// A timeout costs one timeout per batch, not one per event.
func TestTimeoutIsUnavailable(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r request) {
		<-release // never answers within the timeout
	})
	t.Cleanup(func() { close(release) }) // before the server's Close (cleanups run last-in first-out)
	c := newConsumer(t, rc.srv.URL, func(w *Config) { w.Timeout = 300 * time.Millisecond; w.Concurrency = 1 })
	start := time.Now()
	evs := events(5, 1)
	out := c.Deliver(t.Context(), evs)
	checkOutage(t, evs, out, "no answer within 300ms", 1)
	if !testenv.MatchesError(delivery.NoAnswerPattern, out[0].Reason) {
		t.Errorf("%q is not selected by delivery.NoAnswerPattern %q", out[0].Reason, delivery.NoAnswerPattern)
	}
	if d := time.Since(start); d > 1200*time.Millisecond {
		t.Fatalf("Deliver of 5 events took %s with a 300ms timeout; want one timeout", d)
	}
	// The request may reach the handler after the client gave up on it, or
	// never (on a loaded machine the 300 ms can pass before it is written):
	// wait for it for a while, then there must be no other.
	for deadline := time.Now().Add(10 * time.Second); len(rc.requests()) == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(rc.requests()); n > 1 {
		t.Fatalf("receiver saw %d requests, want at most 1", n)
	}
}

// testLease is a delivery.Lease: partition = event id mod 8, a fixed epoch, and
// a deadline that passes when expired is set.
type testLease struct {
	epoch   int64
	expired atomic.Bool
}

func (l *testLease) Token(e *outbox.Event) (int, int64, bool) { return int(e.ID % 8), l.epoch, true }
func (l *testLease) Check() error {
	if l.expired.Load() {
		return delivery.ErrLeaseExpired
	}
	return nil
}

// Every request carries the fencing token of its event; once the lease
// deadline has passed nothing is sent and the events are NotAttempted.
func TestLeaseFencing(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	c := newConsumer(t, rc.srv.URL, nil)
	l := &testLease{epoch: 42}
	ctx := delivery.WithLease(t.Context(), l)
	evs := events(3, 2)
	for i, o := range c.Deliver(ctx, evs) {
		if o.Kind != delivery.OK {
			t.Fatalf("event %d: %v %q", evs[i].ID, o.Kind, o.Reason)
		}
	}
	reqs := rc.requests()
	if len(reqs) != len(evs) {
		t.Fatalf("receiver saw %d requests, want %d", len(reqs), len(evs))
	}
	for _, r := range reqs {
		if got, want := r.header.Get(sink.HeaderPartition), strconv.FormatInt(r.msg.ID%8, 10); got != want {
			t.Fatalf("event %d: %s %q, want %q", r.msg.ID, sink.HeaderPartition, got, want)
		}
		if got := r.header.Get(sink.HeaderLeaseEpoch); got != "42" {
			t.Fatalf("event %d: %s %q, want 42", r.msg.ID, sink.HeaderLeaseEpoch, got)
		}
	}

	// Without a lease in the context there is no token.
	c.Deliver(t.Context(), events(1, 1))
	if r := rc.requests()[len(evs)]; r.header.Get(sink.HeaderLeaseEpoch) != "" || r.header.Get(sink.HeaderPartition) != "" {
		t.Fatalf("request without a lease carries a token: %v", r.header)
	}

	l.expired.Store(true)
	more := events(4, 2)
	for i, o := range c.Deliver(ctx, more) {
		if o.Kind != delivery.NotAttempted || (o.Reason != "" && o.Reason != "lease deadline passed") {
			t.Fatalf("event %d after the lease deadline: %v %q, want not attempted", more[i].ID, o.Kind, o.Reason)
		}
	}
	if n := len(rc.requests()); n != len(evs)+1 {
		t.Fatalf("receiver saw %d requests after the lease deadline passed", n-len(evs)-1)
	}
}

// The relay cancels a request in flight when its lease deadline passes: the
// event is NotAttempted, naming the lease.
func TestLeaseCancelsInFlight(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r request) {
		started <- struct{}{}
		<-release
	})
	t.Cleanup(func() { close(release) })
	c := newConsumer(t, rc.srv.URL, nil)
	ctx, cancel := context.WithCancelCause(delivery.WithLease(t.Context(), &testLease{epoch: 1}))
	go func() { <-started; cancel(delivery.ErrLeaseExpired) }()
	out := c.Deliver(ctx, events(1, 2))
	if out[0].Kind != delivery.NotAttempted || !strings.Contains(out[0].Reason, "lease deadline passed") || out[1].Kind != delivery.NotAttempted {
		t.Fatalf("cancelled at the lease deadline: %v, %v; want not attempted", out[0], out[1])
	}
}

// A TLS handshake that fails (here: a certificate from an unknown
// authority) is the endpoint's failure, not the events': Unavailable, and
// the rest of the batch is not sent.
func TestTLSHandshakeFailureIsUnavailable(t *testing.T) {
	t.Parallel()
	var reached atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	t.Cleanup(srv.Close)
	c := newConsumer(t, srv.URL, func(w *Config) { w.Concurrency = 1 })
	evs := events(3, 1)
	out := c.Deliver(t.Context(), evs)
	checkOutage(t, evs, out, "certificate", 1)
	if n := reached.Load(); n != 0 {
		t.Fatalf("%d requests reached the handler through a failed handshake", n)
	}
	t.Logf("unavailable: %s", out[0].Reason)
}

// An endpoint URL with a token in its user information or query: the reason
// of an outage names the endpoint without them (reasons reach last_error,
// the pause state, logs and pages).
func TestOutageReasonHidesURLSecrets(t *testing.T) {
	t.Parallel()
	addr := testenv.FreeAddr(t) // nothing listens there
	c := newConsumer(t, "http://user:pa55word@"+addr+"/hook?token=s3cr3t", nil)
	out := c.Deliver(t.Context(), events(1, 1))
	if out[0].Kind != delivery.Unavailable {
		t.Fatalf("outcome %v %q, want unavailable", out[0].Kind, out[0].Reason)
	}
	for _, secret := range []string{"pa55word", "s3cr3t", "user"} {
		if strings.Contains(out[0].Reason, secret) {
			t.Errorf("reason %q shows %q", out[0].Reason, secret)
		}
	}
	if !strings.Contains(out[0].Reason, addr+"/hook") {
		t.Errorf("reason %q does not name the endpoint", out[0].Reason)
	}
}
