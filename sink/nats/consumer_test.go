package nats_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/sink"
	"github.com/searchsync/searchsync/sink/nats"
	"github.com/searchsync/searchsync/sink/nats/natstest"
	"github.com/searchsync/searchsync/sink/sinktest"
)

// names gives a test its own stream and subject prefix on the shared server.
func names(t *testing.T) (stream, prefix string) {
	stream = strings.ToUpper(testenv.Name("t"))
	prefix = testenv.Name("ob")
	return stream, prefix
}

func newConsumer(t *testing.T, cfg nats.Config) *nats.Consumer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := nats.New(ctx, "queue", cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		deleteStream(t, cfg.URL, cfg.Stream)
	})
	return c
}

func TestMessageSubjectHeadersBody(t *testing.T) {
	t.Parallel()
	url := natstest.URL(t)
	stream, prefix := names(t)
	c := newConsumer(t, nats.Config{URL: url, Stream: stream, CreateStream: true,
		Subject: prefix + ".{aggregate_type}.{tenant_id}.{aggregate_id}.{event_type}"})
	var g sinktest.Events
	events := g.Make("a", "")
	out := c.Deliver(context.Background(), events)
	for i, o := range out {
		if o.Kind != delivery.OK {
			t.Fatalf("event %d: %s %s", events[i].ID, o.Kind, o.Reason)
		}
	}
	msgs := natstest.Messages(t, url, stream)
	if len(msgs) != 2 {
		t.Fatalf("%d messages, want 2", len(msgs))
	}
	e := events[0]
	m := msgs[0]
	wantSubj := prefix + ".DDM_ENTITY." + e.TenantID.String() + "." + e.AggregateID.String() + ".entity.customer.updated"
	if m.Subject != wantSubj || c.Subject(e) != wantSubj {
		t.Errorf("subject %q, want %q", m.Subject, wantSubj)
	}
	want := map[string]string{
		"Nats-Msg-Id":            "1",
		nats.HeaderEventID:       "1",
		nats.HeaderEventType:     "entity.customer.updated",
		nats.HeaderSchemaVersion: "1",
		nats.HeaderAggregateType: "DDM_ENTITY",
		nats.HeaderAggregateID:   e.AggregateID.String(),
		nats.HeaderTenantID:      e.TenantID.String(),
		nats.HeaderCorrelationID: e.CorrelationID.String(),
		nats.HeaderCreatedAt:     e.CreatedAt.Format(time.RFC3339Nano),
		"Content-Type":           "application/json",
	}
	for k, v := range want {
		if got := m.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	body, _ := sink.Body(e)
	if string(m.Data) != string(body) {
		t.Errorf("body %s, want sink.Body %s", m.Data, body)
	}
	// No aggregate, no tenant: "_" tokens, no such headers.
	if want := prefix + ".SYSTEM._._.system.tick.created"; msgs[1].Subject != want {
		t.Errorf("subject %q, want %q", msgs[1].Subject, want)
	}
	if h := msgs[1].Header; h.Get(nats.HeaderAggregateID) != "" || h.Get(nats.HeaderTenantID) != "" {
		t.Errorf("headers of an event without aggregate/tenant: %v", h)
	}
}

func TestSubjectTemplate(t *testing.T) {
	t.Parallel()
	agg := uuid.MustParse("6f1c1b9e-58a4-4a55-9a43-0d5c38ff0a11")
	e := &outbox.Event{EventType: "entity.cust omer*.up>dated", AggregateType: "DDM ENTITY", AggregateID: &agg}
	s, err := nats.ParseSubject("outbox.{aggregate_type}.{aggregate_id}.{event_type}")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Render(e), "outbox.DDM_ENTITY.6f1c1b9e-58a4-4a55-9a43-0d5c38ff0a11.entity.cust_omer_.up_dated"; got != want {
		t.Errorf("render %q, want %q", got, want)
	}
	e2 := &outbox.Event{EventType: "a..b.", AggregateType: ""}
	if got, want := s.Render(e2), "outbox._._.a._.b._"; got != want {
		t.Errorf("render %q, want %q", got, want)
	}
	if s.StreamSubject() != "outbox.>" || s.Prefix() != "outbox" {
		t.Errorf("stream subject %q prefix %q", s.StreamSubject(), s.Prefix())
	}
	if got := strings.Join(s.Shapes(), " "); got != "outbox.*.*.>" {
		t.Errorf("shapes %q", got)
	}
	mid, _ := nats.ParseSubject("ev.{event_type}.{tenant_id}")
	if got := strings.Join(mid.Shapes(), " "); got != "ev.*.*.* ev.*.*.*.*" {
		t.Errorf("shapes %q", got)
	}
	for _, bad := range []string{"", "{aggregate_type}.x", "outbox..{event_type}", "outbox.*.{event_type}", "outbox.>",
		"outbox.{bogus}", "outbox.x{event_type}", "out box.{event_type}", "outbox.{event_type}.{event_type}"} {
		if _, err := nats.ParseSubject(bad); err == nil {
			t.Errorf("ParseSubject(%q) accepted", bad)
		}
	}
}

func configErr(t *testing.T, err error, key string) {
	t.Helper()
	var ce *nats.ConfigError
	if !errors.As(err, &ce) || ce.Key != key {
		t.Fatalf("error %v, want a *ConfigError for %s", err, key)
	}
	t.Logf("start-up error: %v", err)
}

func TestStartupStopsOnBadStreamConfiguration(t *testing.T) {
	t.Parallel()
	url := natstest.URL(t)
	ctx := context.Background()
	try := func(cfg nats.Config) error {
		c, err := nats.New(ctx, "queue", cfg, testLogger(t))
		if err == nil {
			c.Close()
		}
		return err
	}

	t.Run("missing stream", func(t *testing.T) {
		stream, prefix := names(t)
		err := try(nats.Config{URL: url, Stream: stream, Subject: prefix + ".{event_type}"})
		configErr(t, err, "nats.stream")
		if !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("reason: %v", err)
		}
	})
	t.Run("subjects not covered", func(t *testing.T) {
		stream, prefix := names(t)
		createStream(t, url, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".DDM_ENTITY.>"}, Duplicates: 5 * time.Minute})
		t.Cleanup(func() { deleteStream(t, url, stream) })
		err := try(nats.Config{URL: url, Stream: stream, Subject: prefix + ".{aggregate_type}.{event_type}"})
		configErr(t, err, "nats.subject")
		// A template the stream covers passes.
		if err := try(nats.Config{URL: url, Stream: stream, Subject: prefix + ".DDM_ENTITY.{event_type}"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("duplicate window too short", func(t *testing.T) {
		stream, prefix := names(t)
		createStream(t, url, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".>"}, Duplicates: time.Second})
		t.Cleanup(func() { deleteStream(t, url, stream) })
		err := try(nats.Config{URL: url, Stream: stream, Subject: prefix + ".{event_type}"})
		configErr(t, err, "nats.duplicate_window")
	})
	t.Run("retention mismatch", func(t *testing.T) {
		stream, prefix := names(t)
		createStream(t, url, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".>"}, Retention: jetstream.WorkQueuePolicy})
		t.Cleanup(func() { deleteStream(t, url, stream) })
		err := try(nats.Config{URL: url, Stream: stream, Subject: prefix + ".{event_type}", CreateStream: true})
		configErr(t, err, "nats.retention")
	})
	t.Run("subjects taken by another stream", func(t *testing.T) {
		other, prefix := names(t)
		createStream(t, url, jetstream.StreamConfig{Name: other, Subjects: []string{prefix + ".>"}})
		t.Cleanup(func() { deleteStream(t, url, other) })
		stream, _ := names(t)
		err := try(nats.Config{URL: url, Stream: stream, Subject: prefix + ".{event_type}", CreateStream: true})
		configErr(t, err, "nats.stream")
	})
	t.Run("bad template", func(t *testing.T) {
		stream, _ := names(t)
		configErr(t, try(nats.Config{URL: url, Stream: stream, Subject: "{event_type}.x", CreateStream: true}), "nats.subject")
	})
	t.Run("bad retention", func(t *testing.T) {
		stream, prefix := names(t)
		configErr(t, try(nats.Config{URL: url, Stream: stream, Subject: prefix + ".{event_type}", Retention: "forever"}), "nats.retention")
	})
	t.Run("JetStream disabled", func(t *testing.T) {
		srv := natstest.StartWithoutJetStream(t)
		stream, prefix := names(t)
		configErr(t, try(nats.Config{URL: srv.URL, Stream: stream, Subject: prefix + ".{event_type}", CreateStream: true}), "nats.url")
	})
}

func TestCreateStreamUpdatesAnExistingOne(t *testing.T) {
	t.Parallel()
	url := natstest.URL(t)
	stream, prefix := names(t)
	createStream(t, url, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + "_legacy.>"}, Duplicates: 10 * time.Second})
	newConsumer(t, nats.Config{URL: url, Stream: stream, Subject: prefix + ".{event_type}", CreateStream: true, DuplicateWindow: 7 * time.Minute})
	sc := streamConfig(t, url, stream)
	if !strings.Contains(strings.Join(sc.Subjects, ","), prefix+".>") || !strings.Contains(strings.Join(sc.Subjects, ","), prefix+"_legacy.>") ||
		sc.Duplicates != 7*time.Minute {
		t.Fatalf("stream after update: subjects %v duplicates %s", sc.Subjects, sc.Duplicates)
	}
}

func TestConfigurationChecksTheDuplicateWindow(t *testing.T) {
	t.Parallel()
	base := `
database: {url: "postgres://u:p@127.0.0.1/db"}
relay: {lease_ttl: 20s}
consumers:
  - name: queue
    type: nats
    nats:
      stream: OUTBOX
`
	if _, err := config.Parse("ok.yaml", []byte(base)); err != nil {
		t.Fatal(err)
	}
	for extra, want := range map[string]string{
		"      duplicate_window: 30s\n":      "ok.yaml:9: consumers[0].nats.duplicate_window: 30s is shorter than 2 × relay.lease_ttl (40s)",
		"      retention: forever\n":         "consumers[0].nats.retention",
		"      max_age: 1m\n":                "consumers[0].nats.max_age: 1m0s is shorter than nats.duplicate_window",
		"      max_in_flight: -1\n":          "consumers[0].nats.max_in_flight: must be positive",
		"      url: http://127.0.0.1:4222\n": "consumers[0].nats.url",
	} {
		_, err := config.Parse("ok.yaml", []byte(base+extra))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", extra, err, want)
		}
	}
}

// A stream narrowed (or deleted) after start-up no longer covers the
// subjects: the consumer is Unavailable (an operator fixes the stream; the
// events do not fail), with the hint how the stream comes back.
func TestNoStreamForSubjectIsUnavailable(t *testing.T) {
	t.Parallel()
	url := natstest.URL(t)
	stream, prefix := names(t)
	c := newConsumer(t, nats.Config{URL: url, Stream: stream, Subject: prefix + ".{aggregate_type}.{event_type}", CreateStream: true})
	// An operator narrows the stream after start-up.
	sc := streamConfig(t, url, stream)
	sc.Subjects = []string{prefix + ".OTHER.>"}
	updateStream(t, url, sc)
	var g sinktest.Events
	events := g.Make("a", "a", "b")
	out := c.Deliver(context.Background(), events)
	if out[0].Kind != delivery.Unavailable || out[1].Kind != delivery.NotAttempted || out[2].Kind != delivery.Unavailable {
		t.Fatalf("outcomes %v", out)
	}
	if !strings.Contains(out[0].Reason, "no stream covers subject "+prefix+".DDM_ENTITY.entity.customer.updated") ||
		!strings.Contains(out[0].Reason, "restart searchsync to create it") {
		t.Errorf("reason %q", out[0].Reason)
	}
	t.Logf("unavailable: %s", out[0].Reason)

	// Another stream takes the subjects: the server rejects the expected
	// stream header; poison, with the server's reason.
	other, _ := names(t)
	createStream(t, url, jetstream.StreamConfig{Name: other, Subjects: []string{prefix + ".DDM_ENTITY.>"}})
	t.Cleanup(func() { deleteStream(t, url, other) })
	out = c.Deliver(context.Background(), events[:1])
	if out[0].Kind != delivery.Poison || !strings.Contains(out[0].Reason, "expected stream does not match") {
		t.Fatalf("outcome %v", out[0])
	}
	t.Logf("poison: %s", out[0].Reason)

	// The stream deleted: Unavailable, and the probe says so.
	deleteStream(t, url, stream)
	if err := c.Probe(context.Background()); err == nil || !strings.Contains(err.Error(), "stream \""+stream+"\" missing") {
		t.Fatalf("probe without the stream: %v", err)
	}
}

// No PubAck within nats.timeout is Unavailable; the events of the batch not
// published yet are not published after it (one timeout per batch).
func TestNoPubAckIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	stream, prefix := names(t)
	c := newConsumer(t, nats.Config{URL: srv.URL, Stream: stream, Subject: prefix + ".{event_type}", CreateStream: true,
		Timeout: time.Second, MaxInFlight: 1})
	var g sinktest.Events
	// A subscriber on the subject answering nothing stands in for a stream
	// that takes the message but whose PubAck never comes: the server no
	// longer says "no responders", and the publish times out.
	nc, err := natsgo.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sc := streamConfig(t, srv.URL, stream)
	sc.Subjects = []string{prefix + ".other"}
	updateStream(t, srv.URL, sc)
	var seen atomic.Int32
	if _, err := nc.Subscribe(prefix+".>", func(*natsgo.Msg) { seen.Add(1) }); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	events := g.Make("a", "a", "b", "c")
	start := time.Now()
	out := c.Deliver(context.Background(), events)
	if out[0].Kind != delivery.Unavailable || out[1].Kind != delivery.NotAttempted || !strings.Contains(out[0].Reason, "no PubAck") {
		t.Fatalf("outcomes %v", out)
	}
	for _, o := range out[2:] {
		if o.Kind != delivery.NotAttempted || !strings.HasPrefix(o.Reason, "not published: the stream failed earlier in this batch: nats: no PubAck") {
			t.Fatalf("outcomes %v; want the later aggregates not published", out)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Deliver took %s with a 1s timeout", d)
	}
	nc.Flush()
	if n := seen.Load(); n != 1 {
		t.Errorf("%d messages published, want 1", n)
	}
	t.Logf("unavailable: %s", out[0].Reason)
}

// The server stopped: the batch is Unavailable at once ("not connected":
// the first event; the others not published) and Probe fails; back, Probe succeeds and delivery works again.
// Then the server runs without JetStream: Unavailable and Probe fails, with
// that reason; with JetStream again (same store), back to normal.
func TestServerDownIsUnavailableAndProbed(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	stream, prefix := names(t)
	c := newConsumer(t, nats.Config{URL: srv.URL, Stream: stream, Subject: prefix + ".{event_type}", CreateStream: true, Timeout: 2 * time.Second})
	var g sinktest.Events
	ctx := context.Background()
	if err := c.Probe(ctx); err != nil {
		t.Fatalf("probe: %v", err)
	}
	sinktest.DeliverAll(t, c, g.Make("a", "b"))

	srv.Stop()
	testenv.Eventually(t, 10*time.Second, func() bool { return c.Probe(ctx) != nil }, "probe fails once the server is down")
	if err := c.Probe(ctx); !strings.Contains(err.Error(), "not connected") {
		t.Errorf("probe while down: %v", err)
	}
	evs := g.Make("a", "b", "c", "a")
	start := time.Now()
	out := c.Deliver(ctx, evs)
	if out[0].Kind != delivery.Unavailable || !strings.Contains(out[0].Reason, "not connected") {
		t.Fatalf("first event while the server is down: %v", out[0])
	}
	for i, o := range out[1:3] {
		// Not published after the first failure: their attempts must not move.
		if o.Kind != delivery.NotAttempted || !strings.HasPrefix(o.Reason, "not published: ") || !strings.Contains(o.Reason, "not connected") {
			t.Fatalf("event %d while the server is down: %v", evs[i+1].ID, o)
		}
	}
	if out[3].Kind != delivery.NotAttempted {
		t.Fatalf("second event of a: %v", out[3])
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Deliver took %s while disconnected; want at once", d)
	}
	srv.Restart()
	testenv.Eventually(t, 30*time.Second, func() bool { return c.Probe(ctx) == nil }, "probe succeeds once the server is back")
	sinktest.DeliverAll(t, c, evs)

	srv.Stop()
	srv.SetJetStream(false)
	srv.Restart()
	testenv.Eventually(t, 30*time.Second, func() bool {
		err := c.Probe(ctx)
		return err != nil && strings.Contains(err.Error(), "jetstream not enabled")
	}, "probe says JetStream is not enabled")
	out = c.Deliver(ctx, g.Make("a"))
	if out[0].Kind != delivery.Unavailable || !strings.Contains(out[0].Reason, "JetStream not enabled") {
		t.Fatalf("without JetStream: %v", out[0])
	}
	t.Logf("unavailable: %s", out[0].Reason)
	srv.Stop()
	srv.SetJetStream(true)
	srv.Restart()
	testenv.Eventually(t, 30*time.Second, func() bool { return c.Probe(ctx) == nil }, "probe succeeds with JetStream back")
	sinktest.DeliverAll(t, c, g.Make("a", "d"))
}

func TestWaitsForServerAtStartup(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	srv.Stop()
	stream, prefix := names(t)
	cfg := nats.Config{URL: srv.URL, Stream: stream, Subject: prefix + ".{event_type}", CreateStream: true}
	// Gives up when ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := nats.New(ctx, "queue", cfg, testLogger(t)); err == nil || !strings.Contains(err.Error(), "gave up waiting") {
		t.Fatalf("error %v", err)
	}
	// Connects once the server is there.
	done := make(chan error, 1)
	go func() {
		c, err := nats.New(context.Background(), "queue", cfg, testLogger(t))
		if err == nil {
			c.Close()
		}
		done <- err
	}()
	srv.Restart()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("New did not return after the server started")
	}
}

func streamConfig(t *testing.T, url, name string) jetstream.StreamConfig {
	t.Helper()
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().Config
}

func updateStream(t *testing.T, url string, sc jetstream.StreamConfig) {
	t.Helper()
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.UpdateStream(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
}
