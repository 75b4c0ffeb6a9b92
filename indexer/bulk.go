package indexer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"golang.org/x/sync/errgroup"

	"github.com/searchsync/searchsync/delivery"
)

// WriterConfig configures a Writer. The zero value is usable: every field
// has the default its comment names.
type WriterConfig struct {
	// FlushCount is the most ops in one _bulk request. Default 1000.
	FlushCount int
	// FlushBytes is the most bytes (estimated NDJSON size) in one _bulk
	// request; an op larger than this goes alone. Default 5 MiB.
	FlushBytes int
	// FlushInterval is how long Add keeps ops queued before it sends them
	// (counted from the first queued op). Default 1s.
	FlushInterval time.Duration
	// Concurrency is the most _bulk requests in flight at once, over all
	// Write and Add calls of the writer. Default 2.
	Concurrency int
	// RequestTimeout bounds one _bulk request: an engine that takes the
	// connection but does not answer (a stalled node, a black-holed
	// network) is Unavailable after it ("no answer within …") instead of
	// holding the batch. Default 30s.
	RequestTimeout time.Duration
	// RetryInitial is the first wait before retrying items answered 429
	// (rejected execution) or 5xx while the request as a whole was
	// answered. Default 100ms.
	RetryInitial time.Duration
	// RetryMax caps one wait. Default 2s.
	RetryMax time.Duration
	// RetryElapsed bounds how long the retried items of one request keep
	// trying; what still fails then is reported with its last outcome
	// (Unavailable for 429, Retry for 5xx) so that the relay decides.
	// Default 5s: an overloaded engine must reach the relay (which pauses
	// the consumer) within seconds.
	RetryElapsed time.Duration
	// Logger receives retries and give-ups (debug/warn). Default: discard.
	Logger *slog.Logger
	// OnBulk, when set, is called after every _bulk request with its number
	// of ops, the bytes of their documents, how long it took and its error
	// (nil when the engine answered, whatever the items said); for metrics.
	OnBulk func(ops, docBytes int, took time.Duration, err error)
}

func (c WriterConfig) withDefaults() WriterConfig {
	if c.FlushCount <= 0 {
		c.FlushCount = 1000
	}
	if c.FlushBytes <= 0 {
		c.FlushBytes = 5 << 20
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = time.Second
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 2
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.RetryInitial <= 0 {
		c.RetryInitial = 100 * time.Millisecond
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 2 * time.Second
	}
	if c.RetryElapsed <= 0 {
		c.RetryElapsed = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Outcome is the result of one op: its sink outcome (OK, Stale, Retry,
// Unavailable, Poison, or NotAttempted when the context ended or the lease
// deadline passed before it was sent, or the request in flight was
// cancelled), the engine's last answer for it, and how many requests
// carried it.
type Outcome struct {
	delivery.Outcome
	Result   BulkResult // zero when no item answer was received
	Attempts int
}

// WriterStats are counters since the writer was made.
type WriterStats struct {
	Requests        int64 // _bulk requests sent (including retries)
	Ops             int64 // ops handed to Write/Add
	OK              int64
	Stale           int64
	Retry           int64 // ops reported Retry (after the writer's own retries)
	Unavailable     int64 // ops reported Unavailable (the engine as a whole could not take them)
	Poison          int64
	ItemRetries     int64 // items re-sent after a 429/5xx answer
	TransportErrors int64 // requests that got no answer
}

// Writer sends versioned ops to the engine in _bulk requests and reads every
// item of every answer. Safe for concurrent use.
//
// Classification (see Classify): 2xx is OK; a 409 version conflict is Stale
// (the engine already holds this or a newer version: delivered); mapping
// and parse errors and other 4xx are Poison with the engine's type and
// reason. What is about the engine rather than the op is Unavailable, at
// once and without retries of the writer's own, so that the relay pauses
// the consumer within seconds: a request that gets no answer (connection
// refused or reset, DNS, TLS, no answer within RequestTimeout), a whole
// request answered 429, 5xx, 401 or 403, an answer the writer cannot read,
// and the items refused by a cluster block, for a missing index or alias,
// or 401/403. Two item answers
// are retried by the writer first — only the failing items, in a smaller
// request, with exponential backoff until RetryElapsed — and reported with
// their last outcome when they still fail: 429 rejected execution
// (Unavailable: the engine is overloaded) and other 5xx (Retry: a failure
// of that item while its neighbours were written).
//
// After a whole request failed so, the requests of the same Write not sent
// yet are not sent: their ops are NotAttempted ("not sent: ..."), so that
// an outage costs one request per Write. Before every request the writer
// checks the relay's partition lease (delivery.CheckLease): once it has passed
// nothing more is sent and the ops not yet sent are NotAttempted ("lease
// deadline passed").
type Writer struct {
	eng Engine
	cfg WriterConfig
	sem chan struct{}

	stats struct {
		requests, ops, ok, stale, retry, unavailable, poison, itemRetries, transport atomic.Int64
	}

	// async (Add) state
	mu       sync.Mutex
	queue    []queued
	queueLen int // estimated bytes
	timer    *time.Timer
	closed   bool
	running  int           // async batches in flight
	idle     chan struct{} // closed when running drops to 0
	bgCtx    context.Context
	bgCancel context.CancelFunc
}

type queued struct {
	op   BulkOp
	done func(Outcome)
}

// NewWriter returns a writer to eng.
func NewWriter(eng Engine, cfg WriterConfig) *Writer {
	cfg = cfg.withDefaults()
	w := &Writer{eng: eng, cfg: cfg, sem: make(chan struct{}, cfg.Concurrency)}
	w.bgCtx, w.bgCancel = context.WithCancel(context.Background())
	return w
}

// Stats returns a snapshot of the counters.
func (w *Writer) Stats() WriterStats {
	s := &w.stats
	return WriterStats{
		Requests: s.requests.Load(), Ops: s.ops.Load(), OK: s.ok.Load(), Stale: s.stale.Load(),
		Retry: s.retry.Load(), Unavailable: s.unavailable.Load(), Poison: s.poison.Load(), ItemRetries: s.itemRetries.Load(),
		TransportErrors: s.transport.Load(),
	}
}

// Write sends ops now — split into requests by FlushCount and FlushBytes, at
// most Concurrency in flight — and returns one Outcome per op, in order. It
// returns when every op has a final outcome (after the writer's own
// retries) or ctx ends (unsent ops and ops in flight are NotAttempted, ops
// waiting for a retry of the writer keep their last outcome).
//
// Ops of one document should be coalesced by the caller; if several are
// given, external versions keep the highest, whatever the order.
func (w *Writer) Write(ctx context.Context, ops []BulkOp) []Outcome {
	out := make([]Outcome, len(ops))
	w.stats.ops.Add(int64(len(ops)))
	// The first failure of a whole request (the engine cannot take
	// anything): the requests not sent yet are not sent.
	var down atomic.Pointer[string]
	var g errgroup.Group
	g.SetLimit(w.cfg.Concurrency)
	var chunk []int
	size := 0
	flush := func() {
		if len(chunk) == 0 {
			return
		}
		idx := chunk
		chunk, size = nil, 0
		g.Go(func() error {
			w.send(ctx, &down, ops, idx, out)
			return nil
		})
	}
	for i := range ops {
		if reason := invalid(&ops[i]); reason != "" {
			out[i] = Outcome{Outcome: delivery.Poisonf("%s", reason)}
			w.stats.poison.Add(1)
			continue
		}
		n := opSize(&ops[i])
		if len(chunk) > 0 && (len(chunk) >= w.cfg.FlushCount || size+n > w.cfg.FlushBytes) {
			flush()
		}
		chunk = append(chunk, i)
		size += n
	}
	flush()
	_ = g.Wait() // the sends return nil: their outcomes are in out
	return out
}

// invalid checks what the engine would reject for the whole request rather
// than for the item, so that one bad op cannot fail its neighbours.
func invalid(op *BulkOp) string {
	switch {
	case op.Type != OpIndex && op.Type != OpDelete:
		return fmt.Sprintf("bulk op %s/%s: unknown op type %q", op.Index, op.ID, op.Type)
	case op.Index == "" || op.ID == "":
		return fmt.Sprintf("bulk op %s %q/%q: index and id are required", op.Type, op.Index, op.ID)
	case op.Version < 0:
		return fmt.Sprintf("bulk op %s %s/%s: negative version %d", op.Type, op.Index, op.ID, op.Version)
	case op.Type == OpIndex && !op.Compact && !json.Valid(op.Doc):
		return fmt.Sprintf("bulk op index %s/%s: document is not valid JSON", op.Index, op.ID)
	}
	return ""
}

// opSize estimates the NDJSON size of an op.
func opSize(op *BulkOp) int {
	return 80 + len(op.Index) + len(op.ID) + len(op.Routing) + len(op.Doc)
}

// send delivers ops[idx...] (one request, then retries of what failed
// temporarily) and fills out[idx...].
func (w *Writer) send(ctx context.Context, down *atomic.Pointer[string], ops []BulkOp, idx []int, out []Outcome) {
	if ctx.Err() != nil {
		return // NotAttempted
	}
	select {
	case w.sem <- struct{}{}:
	case <-ctx.Done():
		return // NotAttempted
	}
	defer func() { <-w.sem }()
	w.sendHeld(ctx, down, ops, idx, out)
}

// sendHeld is send with the request slot already held.
func (w *Writer) sendHeld(ctx context.Context, down *atomic.Pointer[string], ops []BulkOp, idx []int, out []Outcome) {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(w.cfg.RetryInitial),
		backoff.WithMaxInterval(w.cfg.RetryMax),
		backoff.WithMaxElapsedTime(w.cfg.RetryElapsed),
	)
	start := time.Now()
	pending := idx
	batch := make([]BulkOp, 0, len(idx))
	for attempt := 1; ; attempt++ {
		if reason := down.Load(); reason != nil && attempt == 1 {
			// NotAttempted, not Unavailable: never sent, its attempts
			// must not move whatever else the batch delivered.
			w.finish(out, pending, Outcome{Outcome: delivery.Outcome{Kind: delivery.NotAttempted, Reason: "not sent: an earlier request of this write failed: " + *reason}})
			return
		}
		if err := delivery.CheckLease(ctx); err != nil {
			if attempt == 1 {
				// Nothing of it was sent: the relay leaves the rows as they are.
				w.finish(out, pending, Outcome{Outcome: delivery.Outcome{Kind: delivery.NotAttempted, Reason: fenced(err)}})
			} else {
				w.giveUp(out, pending, attempt-1, fmt.Sprintf("(not retried: %s)", fenced(err)))
			}
			return
		}
		batch = batch[:0]
		for _, i := range pending {
			batch = append(batch, ops[i])
		}
		w.stats.requests.Add(1)
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, w.cfg.RequestTimeout)
		res, err := w.eng.Bulk(rctx, batch)
		timedOut := err != nil && ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded)
		cancel()
		if timedOut {
			err = &TransportError{Op: fmt.Sprintf("%s bulk of %d ops", w.eng.Kind(), len(batch)),
				Err: fmt.Errorf("no answer within %s", w.cfg.RequestTimeout)}
		}
		if w.cfg.OnBulk != nil {
			size := 0
			for _, op := range batch {
				size += len(op.Doc)
			}
			w.cfg.OnBulk(len(batch), size, time.Since(sent), err)
		}
		if err != nil {
			ee, isEngine := AsEngineError(err)
			switch {
			case ctx.Err() != nil:
				// Cancelled in flight (the relay stops, or its lease
				// deadline passed): the engine may or may not have
				// applied it; the row stays as it is and the versioned
				// redelivery is harmless.
				w.finish(out, pending, Outcome{Outcome: delivery.Outcome{Kind: delivery.NotAttempted, Reason: "bulk interrupted: " + fenced(context.Cause(ctx))}, Attempts: attempt})
			case isEngine && ee.Status == http.StatusRequestEntityTooLarge && len(pending) > 1:
				// Over http.max_content_length: halve until it fits (a
				// single op that is still too large is poison).
				mid := len(pending) / 2
				w.sendHeld(ctx, down, ops, pending[:mid], out)
				w.sendHeld(ctx, down, ops, pending[mid:], out)
			case isEngine && !ee.Temporary() && !forbiddenStatus(ee.Status):
				// The whole request was refused (not an item): nothing
				// about it will change by retrying.
				w.finish(out, pending, Outcome{Outcome: delivery.Poisonf("%s", ee.Error()), Result: BulkResult{Status: ee.Status, ErrType: ee.Type, ErrReason: ee.Reason}, Attempts: attempt})
			default:
				// No answer, the whole request answered 429/5xx/401/403,
				// the wrong engine kind, an unreadable answer: the engine
				// cannot take anything now. The relay pauses the consumer
				// and probes; retrying here would only delay that.
				if IsTransport(err) {
					w.stats.transport.Add(1)
				}
				o := Outcome{Outcome: delivery.Unavailablef("%v", err), Attempts: attempt}
				if isEngine {
					o.Result = BulkResult{Status: ee.Status, ErrType: ee.Type, ErrReason: ee.Reason}
				}
				w.finish(out, pending, o)
				down.CompareAndSwap(nil, &o.Reason)
			}
			return
		}
		next := pending[:0:0]
		var reason string
		for j, r := range res {
			i := pending[j]
			o, again := classify(ops[i], r)
			if again {
				next = append(next, i)
				out[i] = Outcome{Outcome: o, Result: r, Attempts: attempt}
				reason = o.Reason
				continue
			}
			w.finish(out, []int{i}, Outcome{Outcome: o, Result: r, Attempts: attempt})
		}
		if len(next) == 0 {
			return
		}
		w.stats.itemRetries.Add(int64(len(next)))
		pending = next
		d := b.NextBackOff()
		if d == backoff.Stop {
			w.cfg.Logger.Warn("bulk: giving up on items", "ops", len(pending), "attempts", attempt,
				"elapsed", time.Since(start).Round(time.Millisecond), "reason", reason)
			w.giveUp(out, pending, attempt, fmt.Sprintf("(still failing after %d attempts in %s)", attempt, time.Since(start).Round(time.Millisecond)))
			return
		}
		w.cfg.Logger.Debug("bulk: retrying items", "ops", len(pending), "attempt", attempt, "wait", d, "reason", reason)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			w.giveUp(out, pending, attempt, fmt.Sprintf("(not retried: %s)", fenced(context.Cause(ctx))))
			return
		}
	}
}

// fenced names why a delivery context ended: the relay's lease deadline, or
// the context's own error.
func fenced(err error) string {
	if errors.Is(err, delivery.ErrLeaseExpired) {
		return "lease deadline passed"
	}
	if err == nil {
		return "cancelled"
	}
	return err.Error()
}

// giveUp reports pending ops with their last outcome (kept in out by
// sendHeld), the note appended to its reason.
func (w *Writer) giveUp(out []Outcome, pending []int, attempts int, note string) {
	for _, i := range pending {
		o := out[i]
		o.Reason += " " + note
		o.Attempts = attempts
		w.finish(out, []int{i}, o)
	}
}

func (w *Writer) finish(out []Outcome, idx []int, o Outcome) {
	for _, i := range idx {
		out[i] = o
	}
	n := int64(len(idx))
	switch o.Kind {
	case delivery.OK:
		w.stats.ok.Add(n)
	case delivery.Stale:
		w.stats.stale.Add(n)
	case delivery.Retry:
		w.stats.retry.Add(n)
	case delivery.Unavailable:
		w.stats.unavailable.Add(n)
	case delivery.Poison:
		w.stats.poison.Add(n)
	}
}

// The console's error patterns (outbox's Filter.Error: * any text, ? one
// character, case-insensitive, anywhere in last_error) that select reasons
// Classify writes; the console's error classes list them
// (dashboard.ErrorClasses) and TestReasonPatterns holds them to the text.
const (
	// RejectedPattern: an item the engine refused with 400
	// (mapper_parsing_exception, document_parsing_exception,
	// strict_dynamic_mapping_exception, illegal_argument_exception): Poison.
	RejectedPattern = "engine answered 400 *exception"
	// FailedPattern: an item the engine failed with 5xx, retried until the
	// attempts ran out.
	FailedPattern = "engine answered 5??"
)

// Classify turns the engine's answer for one op into a sink outcome:
//
//   - 2xx, and 404 for a delete (the document was not there; the engine
//     still records the delete's version): OK.
//   - 409 (version_conflict_engine_exception): Stale — the engine already
//     holds this or a newer version, so the op counts as delivered. For a
//     guarded op (BulkOp.Guarded) it is a conflict instead: Retry, and the
//     writer reads the document again (BulkResult.Conflict).
//   - cluster_block_exception (any status), index_not_found_exception, 401
//     and 403: Unavailable — conditions of the engine that an operator (or
//     the engine itself, for the disk watermark's block) fixes, not faults
//     of the event. The reason starts with "cluster block on <index>",
//     "index <index> missing" or "not authorized to write <index>".
//   - 429 (es_rejected_execution_exception: the write queue is full) and
//     503 unavailable_shards_exception (no active primary shard):
//     Unavailable — the engine is overloaded or the index is not
//     allocated; the Writer retries 429 items itself first.
//   - other 5xx: Retry (the Writer retries these items itself first).
//   - no item answer at all: Retry.
//   - any other 4xx (mapper_parsing_exception, illegal_argument_exception,
//     strict_dynamic_mapping_exception, …): Poison with the engine's type
//     and reason.
func Classify(op BulkOp, r BulkResult) delivery.Outcome {
	o, _ := classify(op, r)
	return o
}

// classify is Classify, and whether the Writer retries the item itself.
func classify(op BulkOp, r BulkResult) (o delivery.Outcome, again bool) {
	switch {
	case r.Status >= 200 && r.Status < 300:
		return delivery.Ok(), false
	case r.Status == http.StatusNotFound && op.Type == OpDelete && r.ErrType == "":
		return delivery.Ok(), false
	}
	// The reasons only for items that need one (two Sprintfs per item were
	// a good part of the writer's CPU).
	what := fmt.Sprintf("%s %s/%s v%d", op.Type, op.Index, op.ID, op.Version)
	engineSaid := r.Answer()
	switch {
	case r.Status == http.StatusConflict && op.Guarded:
		return delivery.Retryf("%s: another writer changed the document since it was read (%s)", what, engineSaid), false
	case r.Status == http.StatusConflict:
		return delivery.Outcome{Kind: delivery.Stale, Reason: what + ": " + engineSaid}, false
	case r.ErrType == "cluster_block_exception":
		return delivery.Unavailablef("cluster block on %s: %s (%s)", op.Index, engineSaid, what), false
	case r.IndexNotFound():
		return delivery.Unavailablef("index %s missing: %s (%s)", op.Index, engineSaid, what), false
	case documentIDsRefused(r.Status, r.ErrReason):
		// The collection, not the event: every write would fail alike.
		return delivery.Unavailablef("%s: %s (%s)", engineSaid, documentIDHint, what), false
	case forbiddenStatus(r.Status):
		return delivery.Unavailablef("not authorized to write %s: %s (%s; %s)", op.Index, engineSaid, what, forbiddenHint("", r.ErrReason)), false
	case r.Status == http.StatusTooManyRequests:
		return delivery.Unavailablef("engine overloaded: %s (%s)", engineSaid, what), true
	case r.ErrType == "unavailable_shards_exception":
		return delivery.Unavailablef("index %s not available: %s (%s)", op.Index, engineSaid, what), false
	case r.Status >= 500:
		return delivery.Retryf("%s: %s", what, engineSaid), true
	case r.Status == 0:
		return delivery.Retryf("%s: no item answer", what), false
	default:
		return delivery.Poisonf("%s: %s", what, engineSaid), false
	}
}

// ErrWriterClosed is returned by Add after Close.
var ErrWriterClosed = errors.New("indexer: writer closed")

// Add queues op; done is called with its outcome once the request that
// carries it has finished (from another goroutine). The queue is sent when
// it reaches FlushCount ops or FlushBytes, or FlushInterval after its first
// op, with at most Concurrency requests in flight; Add blocks while that
// many are busy (back-pressure).
func (w *Writer) Add(ctx context.Context, op BulkOp, done func(Outcome)) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrWriterClosed
	}
	w.queue = append(w.queue, queued{op, done})
	w.queueLen += opSize(&op)
	if len(w.queue) == 1 {
		w.timer = time.AfterFunc(w.cfg.FlushInterval, w.flushQueued)
	}
	var batch []queued
	if len(w.queue) >= w.cfg.FlushCount || w.queueLen >= w.cfg.FlushBytes {
		batch = w.takeLocked()
	}
	w.mu.Unlock()
	if batch != nil {
		return w.dispatch(ctx, batch)
	}
	return nil
}

func (w *Writer) takeLocked() []queued {
	b := w.queue
	w.queue, w.queueLen = nil, 0
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	return b
}

func (w *Writer) flushQueued() {
	w.mu.Lock()
	batch := w.takeLocked()
	w.mu.Unlock()
	if batch != nil {
		_ = w.dispatch(w.bgCtx, batch)
	}
}

// dispatch sends a queued batch in the background; it waits for a free
// request slot first (ctx bounds only that wait).
func (w *Writer) dispatch(ctx context.Context, batch []queued) error {
	select {
	case w.sem <- struct{}{}:
	case <-ctx.Done():
		// Not sent: report NotAttempted so that nobody waits forever.
		for _, q := range batch {
			q.done(Outcome{})
		}
		return ctx.Err()
	}
	<-w.sem // send takes its own slot; this only waited for one
	w.mu.Lock()
	w.running++
	w.mu.Unlock()
	go func() {
		defer func() {
			w.mu.Lock()
			w.running--
			if w.running == 0 && w.idle != nil {
				close(w.idle)
				w.idle = nil
			}
			w.mu.Unlock()
		}()
		ops := make([]BulkOp, len(batch))
		for i, q := range batch {
			ops[i] = q.op
		}
		outs := w.Write(w.bgCtx, ops)
		for i, q := range batch {
			q.done(outs[i])
		}
	}()
	return nil
}

// Flush sends what is queued and waits until every request in flight has
// finished or ctx ends.
func (w *Writer) Flush(ctx context.Context) error {
	w.mu.Lock()
	batch := w.takeLocked()
	w.mu.Unlock()
	if batch != nil {
		if err := w.dispatch(ctx, batch); err != nil {
			return err
		}
	}
	return w.waitIdle(ctx)
}

func (w *Writer) waitIdle(ctx context.Context) error {
	w.mu.Lock()
	if w.running == 0 {
		w.mu.Unlock()
		return nil
	}
	if w.idle == nil {
		w.idle = make(chan struct{})
	}
	ch := w.idle
	w.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close flushes and stops the writer; later Adds fail. When ctx ends first,
// requests in flight are cancelled (their ops are reported NotAttempted). Safe to
// call more than once.
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	err := w.Flush(ctx)
	if err != nil {
		w.bgCancel()
		_ = w.waitIdle(context.Background())
	}
	w.bgCancel()
	return err
}
