package relay_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/relay"
	"github.com/searchsync/searchsync/sink/webhook"
)

// An endpoint that answers 503 with Retry-After: 2 is left alone for 2 s,
// although the relay's probes would come after 100 ms; the 503 is an outage
// of the endpoint (the consumer pauses), not an attempt of the event.
func TestRetryAfterOfTheEndpointIsHonoured(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	var mu sync.Mutex
	var arrivals []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		n := len(arrivals)
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	hook, err := webhook.New("hook", webhook.Config{URL: srv.URL, Secret: "s", Timeout: 5 * time.Second, Concurrency: 2}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fast()
	cfg.Backoff = relay.Backoff{Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond, Multiplier: 2, Jitter: 0.1}
	cfg.Pause = relay.Pause{ProbeInitial: 100 * time.Millisecond, ProbeMax: 200 * time.Millisecond}
	cfg.Routes = []relay.Route{{Consumer: hook}}
	start(t, db, cfg)
	agg := uuid.New()
	ids := write(t, db, event(&agg, "entity.customer.updated", "DDM_ENTITY", 1))

	testenv.Eventually(t, 15*time.Second, func() bool { return getRow(t, db, ids[0]).Status == "dispatched" }, "delivered after the Retry-After")
	mu.Lock()
	defer mu.Unlock()
	if len(arrivals) != 2 {
		t.Fatalf("%d attempts, want 2", len(arrivals))
	}
	if gap := arrivals[1].Sub(arrivals[0]); gap < 1900*time.Millisecond {
		t.Errorf("second attempt %s after the first; the endpoint asked for 2s", gap)
	}
	if r := getRow(t, db, ids[0]); r.Attempts != 0 {
		t.Errorf("row after the endpoint's outage: %+v, want no attempt counted", r)
	}
}
