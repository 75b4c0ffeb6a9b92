package webhook_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/sink"
	"github.com/searchsync/searchsync/sink/sinktest"
	"github.com/searchsync/searchsync/sink/webhook"
)

// The consumer contract suite against a real HTTP receiver that behaves as a
// Standard Webhooks receiver should: it verifies the signature and keeps one
// delivery per webhook-id (the idempotency key). Break makes it answer 503,
// Poison makes it answer 400 for one event.
func TestContract(t *testing.T) {
	sinktest.Run(t, harness{})
}

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

type harness struct{}

type receiver struct {
	mu       sync.Mutex
	broken   bool
	reject   map[int64]bool
	seen     map[int64]bool
	accepted []sinktest.Delivery
	consumer *webhook.Consumer
	t        *testing.T
}

func (harness) Start(t *testing.T) sinktest.Instance {
	rc := &receiver{reject: map[int64]bool{}, seen: map[int64]bool{}, t: t}
	srv := httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(srv.Close)
	c, err := webhook.New("hook", webhook.Config{URL: srv.URL, Secret: secret, Timeout: 5 * time.Second, Concurrency: 4}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc.consumer = c
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := webhook.Verify(secret, r.Header, body); err != nil {
		rc.t.Errorf("receiver: bad signature: %v", err)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	id, err := strconv.ParseInt(r.Header.Get(webhook.HeaderID), 10, 64)
	if err != nil {
		http.Error(w, "bad webhook-id", http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	switch {
	case rc.broken:
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		return
	case rc.reject[id]:
		http.Error(w, "unprocessable event", http.StatusBadRequest)
		return
	case rc.seen[id]:
		w.WriteHeader(http.StatusOK) // a redelivery: already applied
		return
	}
	var m sink.Message
	if err := json.Unmarshal(body, &m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.seen[id] = true
	rc.accepted = append(rc.accepted, sinktest.Delivery{ID: id, Message: m,
		Partition: r.Header.Get(sink.HeaderPartition), LeaseEpoch: r.Header.Get(sink.HeaderLeaseEpoch)})
	w.WriteHeader(http.StatusNoContent)
}

func (rc *receiver) Consumer() sink.Consumer { return rc.consumer }

func (rc *receiver) Received(*testing.T) []sinktest.Delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]sinktest.Delivery(nil), rc.accepted...)
}

func (rc *receiver) Break(*testing.T)  { rc.mu.Lock(); rc.broken = true; rc.mu.Unlock() }
func (rc *receiver) Repair(*testing.T) { rc.mu.Lock(); rc.broken = false; rc.mu.Unlock() }

func (rc *receiver) Poison(_ *testing.T, e *outbox.Event) {
	rc.mu.Lock()
	rc.reject[e.ID] = true
	rc.mu.Unlock()
}
