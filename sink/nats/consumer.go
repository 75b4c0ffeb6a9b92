package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/sink"
)

// Header names carried by every message besides Nats-Msg-Id.
const (
	HeaderEventID       = "Outbox-Event-Id"
	HeaderEventType     = "Outbox-Event-Type"
	HeaderSchemaVersion = "Outbox-Schema-Version"
	HeaderAggregateType = "Outbox-Aggregate-Type"
	HeaderAggregateID   = "Outbox-Aggregate-Id"
	HeaderTenantID      = "Outbox-Tenant-Id"
	HeaderCorrelationID = "Outbox-Correlation-Id"
	HeaderCreatedAt     = "Outbox-Created-At"
)

// Consumer publishes events to a JetStream stream. It is safe for concurrent
// use by several Deliver calls.
type Consumer struct {
	name string
	cfg  Config
	// shownURL names the server in reasons and logs (no user information).
	shownURL string
	subject  *Subject
	logger   *slog.Logger
	nc       *natsgo.Conn
	js       jetstream.JetStream

	closeOnce sync.Once
}

var (
	_ sink.Consumer = (*Consumer)(nil)
	_ sink.Closer   = (*Consumer)(nil)
	_ sink.Prober   = (*Consumer)(nil)
)

// shownURL is the server URL as reasons and logs name it: without user
// information (nats://user:password@host).
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the configured nats.url"
	}
	u.User = nil
	return u.String()
}

// New connects to the server, then creates or updates the stream
// (cfg.CreateStream) or checks that it exists, covers every subject of the
// template and de-duplicates over at least cfg.DuplicateWindow.
//
// A configuration that cannot work (bad template, missing stream, subjects not
// covered, a window too short, retention mismatch, JetStream disabled) returns
// a *ConfigError at once. An unreachable server is waited for with backoff
// until ctx ends, as for every other service searchsync depends on.
//
// Zero fields of cfg take the defaults of Config.WithDefaults.
func New(ctx context.Context, name string, cfg Config, logger *slog.Logger) (*Consumer, error) {
	cfg = cfg.WithDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Consumer{name: name, cfg: cfg, shownURL: shownURL(cfg.URL), logger: logger.With("consumer", name, "stream", cfg.Stream)}
	subj, err := ParseSubject(cfg.Subject)
	if err != nil {
		return nil, c.configErr("nats.subject", "%v", err)
	}
	c.subject = subj
	switch {
	case cfg.Stream == "":
		return nil, c.configErr("nats.stream", "is required")
	case cfg.DuplicateWindow < minDuplicateWindow:
		return nil, c.configErr("nats.duplicate_window", "%s is too short to de-duplicate redeliveries (at least 2 × relay.lease_ttl)", cfg.DuplicateWindow)
	case cfg.MaxInFlight < 1:
		return nil, c.configErr("nats.max_in_flight", "must be positive")
	}
	if _, err := retentionPolicy(cfg.Retention); err != nil {
		return nil, c.configErr("nats.retention", "%v", err)
	}

	wait := 250 * time.Millisecond
	for {
		err := c.start(ctx)
		if err == nil {
			return c, nil
		}
		if c.nc != nil { // not Close: its Once belongs to the caller
			c.nc.Close()
			c.nc, c.js = nil, nil
		}
		var ce *ConfigError
		if errors.As(err, &ce) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("nats: consumer %q: gave up waiting for %s: %w", name, c.shownURL, err)
		}
		c.logger.Warn("nats: not ready, retrying", "url", c.shownURL, "error", err, "retry_in", wait.String())
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("nats: consumer %q: gave up waiting for %s: %w", name, c.shownURL, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}

func (c *Consumer) start(ctx context.Context) error {
	auth, err := c.authOptions()
	if err != nil {
		return err
	}
	opts := append(auth,
		natsgo.Name("searchsync "+c.name),
		natsgo.Timeout(c.cfg.Timeout),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(time.Second),
		// No reconnect buffer: a publish while disconnected fails at once
		// (and becomes Unavailable) instead of waiting in a buffer that is
		// lost when the connection closes.
		natsgo.ReconnectBufSize(-1),
		// A server that refuses the credentials while running is an outage:
		// keep reconnecting (re-reading the secrets) instead of closing the
		// connection for good on the second refusal.
		natsgo.IgnoreAuthErrorAbort(),
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			if err != nil {
				c.logger.Warn("nats: disconnected", "error", err)
			}
		}),
		natsgo.ReconnectHandler(func(nc *natsgo.Conn) {
			c.logger.Info("nats: reconnected", "url", nc.ConnectedUrlRedacted())
		}),
	)
	nc, err := natsgo.Connect(c.cfg.URL, opts...)
	if err != nil {
		return c.connectErr(err)
	}
	c.nc = nc
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncTimeout(c.cfg.Timeout),
		jetstream.WithPublishAsyncMaxPending(max(c.cfg.MaxInFlight*8, 4000)),
	)
	if err != nil {
		return fmt.Errorf("nats: jetstream: %w", err)
	}
	c.js = js
	return c.prepareStream(ctx)
}

// Name is the consumer's configured name.
func (c *Consumer) Name() string { return c.name }

// Close closes the connection; it is safe to call more than once.
func (c *Consumer) Close() error {
	c.closeOnce.Do(func() {
		if c.nc != nil {
			c.nc.Close()
		}
	})
	return nil
}

// Subject returns the subject an event is published on.
func (c *Consumer) Subject(e *outbox.Event) string { return c.subject.Render(e) }

// Probe implements sink.Prober: the connection is up, JetStream answers
// for the account, and the stream exists (one stream info request).
func (c *Consumer) Probe(ctx context.Context) error {
	if st := c.nc.Status(); st != natsgo.CONNECTED {
		return fmt.Errorf("nats: not connected to %s (%s)%s", c.shownURL, st, c.lastAuthErr())
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	if _, err := c.js.AccountInfo(ctx); err != nil {
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return fmt.Errorf("nats: %s: %w", c.shownURL, err)
		}
		return fmt.Errorf("nats: JetStream account info from %s: %w", c.shownURL, err)
	}
	if _, err := c.js.Stream(ctx, c.cfg.Stream); err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("nats: stream %q missing on %s: %w; %s", c.cfg.Stream, c.shownURL, err, c.recreateHint())
		}
		return fmt.Errorf("nats: stream %q info from %s: %w", c.cfg.Stream, c.shownURL, err)
	}
	return nil
}

// recreateHint says how the stream comes back.
func (c *Consumer) recreateHint() string {
	if c.cfg.CreateStream {
		return "restart searchsync to create it (nats.create_stream is on) or create it as configured"
	}
	return "create it (nats.create_stream is off) covering the subjects of nats.subject"
}

// Deliver publishes the events and waits for every PubAck.
//
// Per aggregate the events go one after the other: the next event of an
// aggregate is published only after the previous one was acknowledged, and
// an aggregate stops at its first failure (its later events are
// NotAttempted), so the stream holds every aggregate's events in id order.
// Different aggregates are pipelined: up to nats.max_in_flight publishes
// await their PubAck at once, and an aggregate's next event goes out as soon
// as its previous one is acknowledged.
//
// After the first Unavailable outcome the events not yet published are not
// published: they are NotAttempted, the failure as the reason. Before every
// publish the relay's lease is checked (delivery.CheckLease); once its deadline
// has passed nothing more is published and the events are NotAttempted.
func (c *Consumer) Deliver(ctx context.Context, events []*outbox.Event) []delivery.Outcome {
	out := make([]delivery.Outcome, len(events))
	if len(events) == 0 {
		return out
	}
	// One queue per aggregate (positions in id order); an event without
	// aggregate is a queue of its own.
	var queues []*queue
	index := map[string]*queue{}
	for i, e := range events {
		k := e.AggregateKey()
		if q := index[k]; q != nil && k != "" {
			q.idx = append(q.idx, i)
			continue
		}
		q := &queue{idx: []int{i}}
		queues = append(queues, q)
		if k != "" {
			index[k] = q
		}
	}
	ready := queues
	size := min(len(events), c.cfg.MaxInFlight)
	results := make(chan ackResult, size)
	// One collector waits for the PubAcks in publish order (the order in
	// which a stream answers) and hands the results back.
	pending := make(chan waiter, size)
	defer close(pending)
	go c.collect(ctx, pending, results)
	memo := lookups{}
	inflight := 0
	var down *delivery.Outcome // the first Unavailable outcome of the batch
	fail := func(i int, o delivery.Outcome) {
		out[i] = o
		if o.Kind == delivery.Unavailable && down == nil {
			down = &o
		}
	}
	fenced := ""
	for {
		for len(ready) > 0 && inflight < c.cfg.MaxInFlight && ctx.Err() == nil {
			q := ready[0]
			ready = ready[1:]
			i := q.idx[q.next]
			if fenced == "" {
				if err := delivery.CheckLease(ctx); err != nil {
					if ctx.Err() != nil && !errors.Is(err, delivery.ErrLeaseExpired) {
						break // cancelled: the rest stays NotAttempted
					}
					fenced = "lease deadline passed"
				}
			}
			if fenced != "" {
				out[i] = delivery.Outcome{Kind: delivery.NotAttempted, Reason: fenced}
				continue
			}
			if down != nil {
				// NotAttempted, not Unavailable: the relay counts an
				// Unavailable event as a retry when the batch delivered
				// others, and this one was never published.
				out[i] = delivery.Outcome{Kind: delivery.NotAttempted, Reason: "not published: the stream failed earlier in this batch: " + down.Reason}
				continue
			}
			f, subject, o, err := c.publishOne(ctx, events[i])
			if err != nil {
				o = c.classify(ctx, subject, err, memo)
			}
			if f == nil {
				fail(i, o) // failed at once; the aggregate stops here
				continue
			}
			inflight++
			pending <- waiter{q: q, i: i, subject: subject, f: f, deadline: time.Now().Add(c.cfg.Timeout)}
		}
		if inflight == 0 {
			return out // done, or cancelled with nothing in flight
		}
		r := <-results
		inflight--
		o := r.outcome
		if r.err != nil {
			o = c.classify(ctx, r.subject, r.err, memo)
		}
		fail(r.i, o)
		if o.Kind.Delivered() && r.q.next+1 < len(r.q.idx) {
			r.q.next++
			ready = append(ready, r.q)
		}
	}
}

// queue is one aggregate's events in a batch; next is the one in turn.
type queue struct {
	idx  []int
	next int
}

// ackResult is what became of one publish.
type ackResult struct {
	q       *queue
	i       int
	subject string
	outcome delivery.Outcome
	err     error // to classify, when not nil
}

// publishOne builds the message of e (with the fencing token of ctx's
// lease) and publishes it asynchronously. A failure before the message left
// comes back with a nil future: as an outcome (encoding, not connected) or
// as an error to classify (client-side rejection such as max_payload).
func (c *Consumer) publishOne(ctx context.Context, e *outbox.Event) (jetstream.PubAckFuture, string, delivery.Outcome, error) {
	msg, err := c.message(e)
	if err != nil {
		return nil, "", delivery.Poisonf("%v", err), nil
	}
	if l, ok := delivery.LeaseOf(ctx); ok {
		if part, epoch, ok := l.Token(e); ok {
			msg.Header[sink.HeaderPartition] = []string{strconv.Itoa(part)}
			msg.Header[sink.HeaderLeaseEpoch] = []string{strconv.FormatInt(epoch, 10)}
		}
	}
	if st := c.nc.Status(); st != natsgo.CONNECTED {
		return nil, msg.Subject, delivery.Unavailablef("nats: not connected to %s (%s)%s", c.shownURL, st, c.lastAuthErr()), nil
	}
	f, err := c.js.PublishMsgAsync(msg)
	return f, msg.Subject, delivery.Outcome{}, err
}

// waiter is one publish awaiting its PubAck.
type waiter struct {
	q        *queue
	i        int
	subject  string
	f        jetstream.PubAckFuture
	deadline time.Time
}

// collect waits for the PubAck of every waiter, in order, each until its
// deadline, and sends the results; it ends when pending is closed.
func (c *Consumer) collect(ctx context.Context, pending <-chan waiter, results chan<- ackResult) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for w := range pending {
		results <- c.await(ctx, w, timer)
	}
}

// await waits for one PubAck until its deadline.
func (c *Consumer) await(ctx context.Context, w waiter, timer *time.Timer) ackResult {
	r := ackResult{q: w.q, i: w.i, subject: w.subject}
	ok := func(ack *jetstream.PubAck) {
		if ack.Duplicate {
			c.logger.Debug("nats: duplicate dropped by the stream", "subject", w.subject, "seq", ack.Sequence,
				"msg_id", w.f.Msg().Header.Get(jetstream.MsgIDHeader))
		}
		r.outcome = delivery.Ok()
	}
	// An answer that is there already wins over an expired deadline.
	select {
	case ack := <-w.f.Ok():
		ok(ack)
		return r
	case err := <-w.f.Err():
		r.err = err
		return r
	default:
	}
	timer.Reset(time.Until(w.deadline))
	defer func() {
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}()
	select {
	case ack := <-w.f.Ok():
		ok(ack)
	case err := <-w.f.Err():
		r.err = err
	case <-timer.C:
		r.outcome = delivery.Unavailablef("nats: no PubAck for %s within %s", w.subject, c.cfg.Timeout)
	case <-ctx.Done():
		switch {
		case errors.Is(context.Cause(ctx), delivery.ErrLeaseExpired):
			// The relay's lease deadline passed: it may not ack; the next
			// owner redelivers, de-duplicated by Nats-Msg-Id if stored.
			r.outcome = delivery.Outcome{Kind: delivery.NotAttempted, Reason: "lease deadline passed while waiting for the PubAck"}
		case errors.Is(ctx.Err(), context.Canceled):
			// Stopping: leave the row as it is; the redelivery is
			// de-duplicated by Nats-Msg-Id if the message was stored.
			r.outcome = delivery.Outcome{Kind: delivery.NotAttempted, Reason: "cancelled while waiting for the PubAck"}
		default:
			r.outcome = delivery.Unavailablef("nats: no PubAck for %s before the batch deadline", w.subject)
		}
	}
	return r
}

// MessagePattern is the console's error pattern (outbox's Filter.Error)
// that selects the reasons of a message the server refused (max_payload,
// the stream's rules): "nats: …message…"; the console's error classes list
// it and TestReasonPatterns holds it to the text. A missing PubAck is
// worded as delivery.NoAnswerPattern selects.
const MessagePattern = "nats: *message"

// classify turns a publish error into an outcome.
//
//   - The server rejected the message (a JetStream API error with a 4xx code:
//     message larger than the stream's max_msg_size, the subject captured by
//     another stream than nats.stream, ...) or it exceeds the server's
//     max_payload: Poison with the server's reason.
//   - No responders: nothing listens on the subject. That means that no
//     stream covers it (the stream was deleted or narrowed after start-up),
//     that the stream is momentarily unavailable (a leader election, a
//     restart), or that the server runs without JetStream. The consumer
//     asks the server which stream holds the subject: another stream than
//     nats.stream is Poison; none, no answer, or JetStream not enabled is
//     Unavailable with what the server said (an operator recreates the
//     stream; the probe sees it back).
//   - No PubAck within nats.timeout (the client's timer or ours): Unavailable,
//     "no PubAck".
//   - Everything else (disconnects, 5xx API errors such as
//     insufficient resources or JetStream not enabled): Unavailable.
func (c *Consumer) classify(ctx context.Context, subject string, err error, memo lookups) delivery.Outcome {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, natsgo.ErrMaxPayload):
		return delivery.Poisonf("nats: %s: message exceeds the server's max_payload: %v", subject, err)
	case errors.As(err, &apiErr) && apiErr.Code < 500:
		return delivery.Poisonf("nats: stream %q rejected the message on %s: %s (code %d, err_code %d)",
			c.cfg.Stream, subject, apiErr.Description, apiErr.Code, apiErr.ErrorCode)
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, natsgo.ErrNoResponders):
		return c.noResponders(ctx, subject, err, memo)
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		// The client's own PubAck timer (nats.timeout, the same as await's)
		// fired first: the same condition, said the same way.
		return delivery.Unavailablef("nats: no PubAck for %s within %s", subject, c.cfg.Timeout)
	}
	return delivery.Unavailablef("nats: publish on %s: %v", subject, err)
}

// lookups remembers, within one round of publishes, which stream the server
// said holds a subject, so that a stream that is down costs one lookup per
// subject (and a lookup that fails stops further lookups), not one per event.
type lookups map[string]lookup

type lookup struct {
	stream string
	err    error
}

// failedKey marks a lookup that failed (not answered); later ones are skipped.
const failedKey = ""

func (c *Consumer) noResponders(ctx context.Context, subject string, pubErr error, memo lookups) delivery.Outcome {
	if ctx.Err() != nil {
		return delivery.Unavailablef("nats: publish on %s: %v", subject, pubErr)
	}
	if l, ok := memo[failedKey]; ok {
		return delivery.Unavailablef("nats: publish on %s: %v (and the stream lookup failed: %v)", subject, pubErr, l.err)
	}
	l, ok := memo[subject]
	if !ok {
		lctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		l.stream, l.err = c.js.StreamNameBySubject(lctx, subject)
		cancel()
		if l.err != nil && !errors.Is(l.err, jetstream.ErrStreamNotFound) {
			memo[failedKey] = l
		} else {
			memo[subject] = l
		}
	}
	stream, err := l.stream, l.err
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return delivery.Unavailablef("nats: no stream covers subject %s (expected stream %q; the server answered: %v); %s",
			subject, c.cfg.Stream, pubErr, c.recreateHint())
	case errors.Is(err, natsgo.ErrNoResponders), errors.Is(err, jetstream.ErrJetStreamNotEnabled):
		return delivery.Unavailablef("nats: publish on %s: %v: JetStream not enabled on %s (no JetStream API answers)", subject, pubErr, c.shownURL)
	case err != nil:
		return delivery.Unavailablef("nats: publish on %s: %v (and the stream lookup failed: %v)", subject, pubErr, err)
	case stream != c.cfg.Stream:
		return delivery.Poisonf("nats: subject %s belongs to stream %q, not the configured %q", subject, stream, c.cfg.Stream)
	}
	return delivery.Unavailablef("nats: stream %q covers %s but did not answer (%v); temporarily unavailable", stream, subject, pubErr)
}

// message builds the NATS message of an event.
func (c *Consumer) message(e *outbox.Event) (*natsgo.Msg, error) {
	body, err := sink.Body(e)
	if err != nil {
		return nil, fmt.Errorf("nats: encode event %d: %w", e.ID, err)
	}
	id := strconv.FormatInt(e.ID, 10)
	// The keys are in canonical form already: plain assignment spares
	// Header.Set's canonicalization (a measurable share of the cost).
	h := make(natsgo.Header, 12)
	h[jetstream.MsgIDHeader] = []string{id}
	h[HeaderEventID] = []string{id}
	h[HeaderEventType] = []string{e.EventType}
	h[HeaderSchemaVersion] = []string{strconv.Itoa(e.SchemaVersion)}
	h[HeaderAggregateType] = []string{e.AggregateType}
	if e.AggregateID != nil {
		h[HeaderAggregateID] = []string{e.AggregateID.String()}
	}
	if e.TenantID != nil {
		h[HeaderTenantID] = []string{e.TenantID.String()}
	}
	if e.CorrelationID != nil {
		h[HeaderCorrelationID] = []string{e.CorrelationID.String()}
	}
	if !e.CreatedAt.IsZero() {
		h[HeaderCreatedAt] = []string{e.CreatedAt.UTC().Format(time.RFC3339Nano)}
	}
	h["Content-Type"] = []string{"application/json"}
	// The stream must be ours: a subject captured by another stream is
	// rejected by the server (poison) instead of stored elsewhere.
	h[jetstream.ExpectedStreamHeader] = []string{c.cfg.Stream}
	return &natsgo.Msg{Subject: c.subject.Render(e), Header: h, Data: body}, nil
}
