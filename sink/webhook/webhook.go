// Package webhook owns the webhook consumer: every event is sent as a JSON
// POST (sink.Body) signed the Standard Webhooks way
// (https://www.standardwebhooks.com/):
//
//	webhook-id:        the event id (the receiver's idempotency key)
//	webhook-timestamp: unix seconds of the attempt
//	webhook-signature: v1,<base64(HMAC-SHA256(key, "<id>.<timestamp>.<body>"))>
//
// The key is the configured secret: a secret of the form "whsec_<base64>" is
// base64-decoded first (as the Standard Webhooks libraries do), any other value
// is used as raw bytes, and "env:NAME" reads the value from the environment
// variable NAME. Receivers can check a request with Verify.
//
// # Outcomes
//
// 2xx is delivered. A failure of the endpoint as a whole is delivery.Unavailable
// (the relay pauses the consumer; the events' attempts do not move): no
// connection (refused, reset, DNS, TLS handshake), no answer within
// webhook.timeout, 408, 429 and 5xx, and 401/403 (the receiver refuses our
// signature or credentials: a configuration to fix, not an event to fail).
// A Retry-After header is quoted in the reason and kept in
// Outcome.RetryAfter. Any other status (other 4xx, a redirect) is poison:
// the reason holds the status and the start of the response body.
//
// After the first failure that says the endpoint is down or refuses load —
// no connection, a timeout, 408, 429, 502, 503, 504 — the events of the
// Deliver call that were not sent yet are not sent, so an outage costs one
// timeout per batch, not one per event. They are NotAttempted, with the
// failure as the reason ("not sent: ..."), not Unavailable: when the same
// batch delivered other events (the outage began mid-batch) the relay
// counts an Unavailable event as that event's retry, and an event that was
// never sent must not lose an attempt. When nothing was delivered, the
// batch's Unavailable outcome pauses the consumer either way. A 500 (or
// another 5xx) is the endpoint's answer to one request and may be the
// event's own doing: the batch goes on, and the outcome is Suspect: when
// other events were delivered the relay counts it as that event's retry.
//
// # Fencing
//
// Right before each request the consumer checks the relay's partition lease
// (delivery.CheckLease); once its deadline has passed nothing more is sent and
// the events are NotAttempted ("lease deadline passed"). Every request
// carries the lease's fencing token of its event in the headers
// Searchsync-Partition and Searchsync-Lease-Epoch (sink.HeaderPartition,
// sink.HeaderLeaseEpoch): a receiver keeps the highest epoch seen per
// partition and drops a request with a lower one (docs/consumers.md). The
// consumer has no sink.Prober: while it is paused, its next batch is the
// probe.
//
// # Concurrency and order
//
// Events of different aggregates are sent concurrently, at most
// Webhook.Concurrency requests in flight per endpoint (across every Deliver
// call of the consumer). Events of one aggregate are sent one after the other
// in id order; the first that is not delivered stops its aggregate and the
// later ones are reported NotAttempted.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/internal/secret"
	"github.com/searchsync/searchsync/internal/tlsconf"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/sink"
)

// Header names of the Standard Webhooks scheme.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix marks a base64-encoded secret.
const SecretPrefix = "whsec_"

// Tolerance is how far a webhook-timestamp may lie from the receiver's clock
// in Verify (the Standard Webhooks recommendation).
const Tolerance = 5 * time.Minute

// snippetLen bounds the part of a response body quoted in a poison reason.
const snippetLen = 256

// Consumer posts events to one endpoint. It is safe for concurrent use.
type Consumer struct {
	name   string
	cfg    Config
	key    []byte
	client *http.Client
	logger *slog.Logger
	// shownURL names the endpoint in reasons (no user information, no
	// query).
	shownURL string
	// slots bounds the requests in flight to the endpoint.
	slots chan struct{}
	now   func() time.Time
	// ownClient: the client was built by New and is closed by Close.
	ownClient bool
}

var (
	_ sink.Consumer = (*Consumer)(nil)
	_ sink.Closer   = (*Consumer)(nil)
)

// ConfigError is a webhook configuration that cannot work.
type ConfigError struct {
	Consumer string
	Key      string
	Reason   string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("webhook consumer %q: %s: %s", e.Consumer, e.Key, e.Reason)
}

// shownURL is the endpoint as reasons and logs name it: without user
// information and query, where endpoints often carry a token.
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the configured webhook.url"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "[redacted]"
	}
	return u.String()
}

// New returns the consumer name for the endpoint cfg. Zero fields of cfg take
// the defaults of Config.WithDefaults (timeout 10s, concurrency 8).
// client nil means a client of its own (no redirects followed, idle
// connections for Concurrency requests); a given client is used as it is,
// and the per-request timeout is applied through the request's context.
func New(name string, cfg Config, client *http.Client, logger *slog.Logger) (*Consumer, error) {
	cfg = cfg.WithDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	bad := func(key, format string, args ...any) error {
		return &ConfigError{Consumer: name, Key: key, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case !strings.HasPrefix(cfg.URL, "http://") && !strings.HasPrefix(cfg.URL, "https://"):
		return nil, bad("webhook.url", "%q is not an absolute http(s) URL", cfg.URL)
	case cfg.Timeout < 0:
		return nil, bad("webhook.timeout", "must be positive")
	case cfg.Concurrency < 0:
		return nil, bad("webhook.concurrency", "must be positive")
	}
	key, err := ParseSecret(cfg.Secret)
	if err != nil {
		return nil, bad("webhook.secret", "%v", err)
	}
	own := client == nil
	var tc *tls.Config
	if !cfg.TLS.IsZero() {
		if !own {
			return nil, bad("webhook.tls", "needs the consumer's own HTTP client (New was given one)")
		}
		if !strings.HasPrefix(cfg.URL, "https://") {
			return nil, bad("webhook.tls", "is set, but webhook.url is not https://")
		}
		tc, err = cfg.TLS.BuildFor("webhook.tls")
		if err != nil {
			return nil, &ConfigError{Consumer: name, Key: "webhook.tls", Reason: err.Error()}
		}
	}
	if own {
		client = &http.Client{
			Transport: &http.Transport{
				Proxy:               http.ProxyFromEnvironment,
				DialContext:         (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext,
				MaxIdleConnsPerHost: cfg.Concurrency,
				IdleConnTimeout:     90 * time.Second,
				TLSHandshakeTimeout: cfg.Timeout,
				TLSClientConfig:     tc,
				ForceAttemptHTTP2:   true,
			},
			// A redirect of a POST is a configuration mistake; it is reported
			// (poison), never followed as a GET.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &Consumer{
		name: name, cfg: cfg, key: key, client: client, shownURL: shownURL(cfg.URL),
		logger: logger.With("consumer", name),
		slots:  make(chan struct{}, cfg.Concurrency),
		now:    time.Now, ownClient: own,
	}, nil
}

// Close releases the idle connections of the client New built (a given
// client is left alone). It is safe to call more than once.
func (c *Consumer) Close() error {
	if c.ownClient {
		c.client.CloseIdleConnections()
	}
	return nil
}

// ParseSecret turns a configured secret into the HMAC key: "env:NAME" reads
// the variable NAME first, "file:PATH" the file; "whsec_<base64>" is base64-decoded; anything else
// is the key as it is.
func ParseSecret(ref string) ([]byte, error) {
	if ref == "" {
		return nil, errors.New("is required")
	}
	v, err := secret.Ref(ref).Resolve("webhook.secret")
	if err != nil {
		var se *secret.Error
		if errors.As(err, &se) {
			return nil, errors.New(strings.TrimPrefix(err.Error(), se.Key+": "))
		}
		return nil, err
	}
	secret := v.Reveal()
	if secret == "" {
		return nil, errors.New("is required")
	}
	if enc, ok := strings.CutPrefix(secret, SecretPrefix); ok {
		key, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			return nil, fmt.Errorf("a %s secret must be base64 after the prefix: %w", SecretPrefix, err)
		}
		if len(key) == 0 {
			return nil, fmt.Errorf("the %s secret is empty", SecretPrefix)
		}
		return key, nil
	}
	return []byte(secret), nil
}

// Name is the consumer's configured name.
func (c *Consumer) Name() string { return c.name }

// Deliver posts the events: aggregates concurrently (bounded by the
// endpoint's concurrency), the events of one aggregate in order, stopping at
// the first that is not delivered.
func (c *Consumer) Deliver(ctx context.Context, events []*outbox.Event) []delivery.Outcome {
	out := make([]delivery.Outcome, len(events))
	// Group the positions by aggregate, keeping id order inside each group;
	// events without an aggregate are groups of their own.
	var groups [][]int
	index := map[string]int{}
	for i, e := range events {
		key := e.AggregateKey()
		if key == "" {
			groups = append(groups, []int{i})
			continue
		}
		g, ok := index[key]
		if !ok {
			g = len(groups)
			index[key] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	// One goroutine per group at most Concurrency at a time; the slots bound
	// the requests across concurrent Deliver calls as well.
	workers := min(len(groups), c.cfg.Concurrency)
	next := make(chan []int)
	b := &batch{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for g := range next {
				for _, i := range g {
					out[i] = c.deliverOne(ctx, b, events[i])
					if !out[i].Kind.Delivered() {
						break // the rest of the aggregate stays NotAttempted
					}
				}
			}
		})
	}
	for _, g := range groups {
		next <- g
	}
	close(next)
	wg.Wait()
	return out
}

// batch is the state that the requests of one Deliver call share: the
// first failure that says the endpoint is down.
type batch struct {
	down atomic.Pointer[delivery.Outcome]
}

// notSent is the outcome of an event that is not sent because the endpoint
// failed earlier in the batch: NotAttempted (its attempts must not move),
// the failure as the reason.
func (b *batch) notSent() (delivery.Outcome, bool) {
	o := b.down.Load()
	if o == nil {
		return delivery.Outcome{}, false
	}
	return delivery.Outcome{Kind: delivery.NotAttempted, Reason: "not sent: the endpoint failed earlier in this batch: " + o.Reason}, true
}

// deliverOne sends one event and maps the answer to an outcome. A cancelled
// ctx (the relay is stopping) or a passed lease deadline gives NotAttempted:
// the row stays as it is and the event is sent again later.
func (c *Consumer) deliverOne(ctx context.Context, b *batch, e *outbox.Event) delivery.Outcome {
	if o, ok := b.notSent(); ok {
		return o
	}
	body, err := sink.Body(e)
	if err != nil {
		return delivery.Poisonf("encode event %d: %v", e.ID, err)
	}
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return delivery.Outcome{}
	}
	defer func() { <-c.slots }()
	if o, ok := b.notSent(); ok {
		return o // failed while this one waited for a slot
	}
	if err := delivery.CheckLease(ctx); err != nil {
		if errors.Is(err, delivery.ErrLeaseExpired) {
			return delivery.Outcome{Kind: delivery.NotAttempted, Reason: "lease deadline passed"}
		}
		return delivery.Outcome{}
	}

	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, c.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return delivery.Poisonf("build request: %v", err)
	}
	id := strconv.FormatInt(e.ID, 10)
	ts := c.now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "searchsync-webhook")
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, Sign(c.key, id, ts, body))
	if l, ok := delivery.LeaseOf(ctx); ok {
		if part, epoch, ok := l.Token(e); ok {
			req.Header.Set(sink.HeaderPartition, strconv.Itoa(part))
			req.Header.Set(sink.HeaderLeaseEpoch, strconv.FormatInt(epoch, 10))
		}
	}

	start := time.Now()
	resp, err := c.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			if errors.Is(context.Cause(ctx), delivery.ErrLeaseExpired) {
				return delivery.Outcome{Kind: delivery.NotAttempted, Reason: "lease deadline passed (request cancelled in flight)"}
			}
			return delivery.Outcome{}
		}
		var o delivery.Outcome
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(rctx.Err(), context.DeadlineExceeded) {
			o = delivery.Unavailablef("POST %s: no answer within %s", c.shownURL, c.cfg.Timeout)
		} else {
			o = delivery.Unavailablef("POST %s: %v", c.shownURL, tlsconf.Explain(unwrapURLError(err), "webhook.tls", c.cfg.TLS))
		}
		b.down.CompareAndSwap(nil, &o)
		return o
	}
	snippet := readSnippet(resp.Body)
	resp.Body.Close()
	c.logger.Debug("webhook answered", "event_id", e.ID, "status", resp.StatusCode, "duration", time.Since(start))
	o, down := classify(resp, snippet)
	if down {
		b.down.CompareAndSwap(nil, &o)
	}
	return o
}

// RequestPattern is the console's error pattern (outbox's Filter.Error)
// that selects the reason of an endpoint's 4xx answer, "HTTP 422
// Unprocessable Entity: …" (401/403 included: its credentials); the
// console's error classes list it and TestReasonPatterns holds it to the
// text. A timeout is worded as delivery.NoAnswerPattern selects.
const RequestPattern = "HTTP 4??"

// classify maps a response to an outcome, and says whether the answer
// means that the endpoint as a whole is down or refuses load (the batch's
// later events are then not sent).
func classify(resp *http.Response, snippet string) (delivery.Outcome, bool) {
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return delivery.Ok(), false
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500 ||
		code == http.StatusUnauthorized || code == http.StatusForbidden:
		reason := "HTTP " + resp.Status
		var after time.Duration
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			reason += "; Retry-After " + describeRetryAfter(ra)
			after = parseRetryAfter(ra, time.Now())
		}
		if snippet != "" {
			reason += ": " + snippet
		}
		down := code == http.StatusRequestTimeout || code == http.StatusTooManyRequests ||
			code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout
		// A 500 (not 502/503/504) to one request may be the event's own
		// doing; 401/403 are about the endpoint's configuration.
		suspect := !down && code >= 500
		return delivery.Outcome{Kind: delivery.Unavailable, Reason: reason, RetryAfter: after, Suspect: suspect}, down
	case code >= 300 && code < 400:
		return delivery.Poisonf("HTTP %s: redirect to %q not followed; configure the final URL", resp.Status, resp.Header.Get("Location")), false
	default:
		reason := "HTTP " + resp.Status
		if snippet != "" {
			reason += ": " + snippet
		}
		return delivery.Outcome{Kind: delivery.Poison, Reason: reason}, false
	}
}

// parseRetryAfter reads a Retry-After value (seconds or an HTTP date) as the
// time to wait from now; 0 when it is unreadable or in the past. It is capped
// at a day so that a silly value cannot park an event for ever.
func parseRetryAfter(v string, now time.Time) time.Duration {
	var d time.Duration
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		d = time.Duration(s) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), 24*time.Hour)
}

// describeRetryAfter renders a Retry-After value (seconds or an HTTP date) as
// a duration where it can.
func describeRetryAfter(v string) string {
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return (time.Duration(s) * time.Second).String()
	}
	if t, err := http.ParseTime(v); err == nil {
		return fmt.Sprintf("%s (in %s)", v, time.Until(t).Round(time.Second))
	}
	return strconv.Quote(v)
}

// readSnippet reads the start of a response body as one line of text,
// draining a bounded rest so that the connection can be reused.
func readSnippet(r io.Reader) string {
	buf, _ := io.ReadAll(io.LimitReader(r, snippetLen+1))
	_, _ = io.Copy(io.Discard, io.LimitReader(r, 64<<10))
	truncated := len(buf) > snippetLen
	if truncated {
		buf = buf[:snippetLen]
		for len(buf) > 0 && !utf8.Valid(buf) {
			buf = buf[:len(buf)-1]
		}
	}
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(buf), "?")), " ")
	if truncated {
		s += "…"
	}
	return s
}

func unwrapURLError(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}

// Sign returns the webhook-signature value for one message: "v1," and the
// base64 HMAC-SHA256 of "<id>.<timestamp>.<body>" under key.
func Sign(key []byte, id string, timestamp int64, body []byte) string {
	h := hmac.New(sha256.New, key)
	fmt.Fprintf(h, "%s.%d.", id, timestamp)
	h.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// Verification errors.
var (
	ErrMissingHeaders = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature")
	ErrBadTimestamp   = errors.New("webhook: webhook-timestamp is not unix seconds")
	ErrTimestamp      = errors.New("webhook: webhook-timestamp is outside the tolerance")
	ErrNoSignature    = errors.New("webhook: no matching v1 signature")
)

// Verify checks a received request the way a Standard Webhooks receiver does:
// the three headers are present, the timestamp lies within Tolerance of now,
// and one of the space-separated v1 signatures matches body under secret
// (given in the configuration's forms: "whsec_<base64>", raw, or "env:NAME").
func Verify(secret string, h http.Header, body []byte) error {
	return verify(secret, h, body, time.Now())
}

func verify(secret string, h http.Header, body []byte, now time.Time) error {
	key, err := ParseSecret(secret)
	if err != nil {
		return fmt.Errorf("webhook: secret: %w", err)
	}
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return ErrMissingHeaders
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrBadTimestamp
	}
	if d := now.Sub(time.Unix(sec, 0)); d > Tolerance || d < -Tolerance {
		return fmt.Errorf("%w: %s off", ErrTimestamp, d.Round(time.Second))
	}
	want := []byte(Sign(key, id, sec, body))
	for _, s := range strings.Fields(sigs) {
		if hmac.Equal([]byte(s), want) {
			return nil
		}
	}
	return ErrNoSignature
}
