package relay

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"

	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/sink"
)

// Config configures a Relay. The zero value of every field means its default.
type Config struct {
	// Schema holds the outbox and the relay's tables. Default "mdm".
	Schema string
	// Partitions spreads aggregates over this many partitions. Default 32.
	// Every relay of one database must use the same number.
	Partitions int
	// BatchSize is the most events claimed at once. Default 500.
	BatchSize int
	// InFlight is the most batches delivered at once while claims come back
	// full (see the package doc); batches in flight never share an
	// aggregate, and consumers must take concurrent Deliver calls. 1 delivers
	// one batch at a time (its claim and ack still run beside the
	// neighbouring deliveries). Default 2.
	InFlight int
	// PollInterval is the fallback wake-up when no NOTIFY arrives. Default 1s.
	PollInterval time.Duration
	// LeaseTTL is how long a lease lives without renewal; leases are renewed
	// every LeaseTTL/3. Default 15s.
	LeaseTTL time.Duration
	// MaxAttempts is the number of failed deliveries after which an event
	// becomes failed. Default 10.
	MaxAttempts int
	// Backoff moves available_at after a retry. Defaults: initial 1s, max 10m,
	// multiplier 2, jitter 0.2.
	Backoff config.Backoff
	// Pause is how a paused consumer is probed (see docs/consumers.md).
	// Defaults: first probe after 1s, doubling, at most 3s apart.
	Pause config.Pause
	// ShutdownGrace bounds how long a stop waits for the batch in flight
	// before it abandons it (its events are delivered again later). Default 10s.
	ShutdownGrace time.Duration
	// InstanceID names this relay in aa_relay_instance and aa_relay_lease.
	// Default "<hostname>-<pid>-<random>".
	InstanceID string
	// Routes send events to consumers. An event no route matches is skipped.
	Routes []Route
	// Logger receives the relay's logs. Default slog.Default().
	Logger *slog.Logger
	// OnBatch, when set, is called after every batch with its figures.
	OnBatch func(BatchStats)
}

// Route sends the events Match accepts to Consumer.
type Route struct {
	Consumer sink.Consumer
	// Match reports whether the consumer wants an event of this type and
	// aggregate type. Nil matches everything.
	Match func(eventType, aggregateType string) bool
}

// FromConfig turns the relay section, the schema and the routes of a loaded
// configuration into a Config. consumers maps configured consumer names to
// built consumers; a route that names a consumer that is not there is an
// error.
func FromConfig(c *config.Config, consumers map[string]sink.Consumer, logger *slog.Logger) (Config, error) {
	rc := Config{
		Schema:       c.Database.Schema,
		Partitions:   c.Relay.Partitions,
		BatchSize:    c.Relay.BatchSize,
		InFlight:     c.Relay.InFlight,
		PollInterval: c.Relay.PollInterval,
		LeaseTTL:     c.Relay.LeaseTTL,
		MaxAttempts:  c.Relay.MaxAttempts,
		Backoff:      c.Relay.Backoff,
		Pause:        c.Relay.Pause,
		Logger:       logger,
	}
	var errs []error
	for i, r := range c.Routes {
		cons, ok := consumers[r.Consumer]
		if !ok {
			errs = append(errs, fmt.Errorf("relay: routes[%d]: unknown consumer %q", i, r.Consumer))
			continue
		}
		rc.Routes = append(rc.Routes, Route{Consumer: cons, Match: r.Matches})
	}
	return rc, errors.Join(errs...)
}

func (c *Config) setDefaults() {
	c.Schema = cmp.Or(c.Schema, "mdm")
	c.Partitions = cmp.Or(c.Partitions, 32)
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	c.InFlight = cmp.Or(c.InFlight, 2)
	c.PollInterval = cmp.Or(c.PollInterval, time.Second)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, 15*time.Second)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 10)
	c.Backoff.Initial = cmp.Or(c.Backoff.Initial, time.Second)
	c.Backoff.Max = cmp.Or(c.Backoff.Max, 10*time.Minute)
	c.Backoff.Multiplier = cmp.Or(c.Backoff.Multiplier, 2)
	c.Backoff.Jitter = cmp.Or(c.Backoff.Jitter, 0.2)
	c.Pause.ProbeInitial = cmp.Or(c.Pause.ProbeInitial, time.Second)
	c.Pause.ProbeMax = cmp.Or(c.Pause.ProbeMax, 3*time.Second)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, 10*time.Second)
	if c.InstanceID == "" {
		host, _ := os.Hostname()
		c.InstanceID = fmt.Sprintf("%s-%d-%s", cmp.Or(host, "relay"), os.Getpid(), uuid.NewString()[:8])
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("relay: "+format, args...)) }
	if c.Partitions < 1 || c.Partitions > 4096 {
		bad("partitions %d: must be in [1, 4096]", c.Partitions)
	}
	if c.InFlight < 1 {
		bad("in_flight %d: must be positive", c.InFlight)
	}
	if c.BatchSize < 1 {
		bad("batch_size %d: must be positive", c.BatchSize)
	}
	if c.PollInterval <= 0 {
		bad("poll_interval %s: must be positive", c.PollInterval)
	}
	if c.LeaseTTL < 300*time.Millisecond {
		bad("lease_ttl %s: must be at least 300ms", c.LeaseTTL)
	}
	if c.MaxAttempts < 1 {
		bad("max_attempts %d: must be positive", c.MaxAttempts)
	}
	if c.Backoff.Max < c.Backoff.Initial || c.Backoff.Multiplier < 1 || c.Backoff.Jitter < 0 || c.Backoff.Jitter >= 1 {
		bad("backoff %+v: need max >= initial, multiplier >= 1, jitter in [0,1)", c.Backoff)
	}
	if c.Pause.ProbeInitial <= 0 || c.Pause.ProbeMax < c.Pause.ProbeInitial {
		bad("pause %+v: need probe_initial > 0 and probe_max >= probe_initial", c.Pause)
	}
	for i, r := range c.Routes {
		if r.Consumer == nil {
			bad("routes[%d]: no consumer", i)
		}
	}
	return errors.Join(errs...)
}

// backoffDelay is the delay before the next try of an event that has now
// failed attempts times (attempts >= 1): exponential from Initial by
// Multiplier, capped at Max, randomised by Jitter (cenkalti/backoff).
func backoffDelay(b config.Backoff, attempts int) time.Duration {
	eb := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(b.Initial),
		backoff.WithMaxInterval(b.Max),
		backoff.WithMultiplier(b.Multiplier),
		backoff.WithRandomizationFactor(b.Jitter),
		backoff.WithMaxElapsedTime(0),
	)
	d := eb.NextBackOff()
	for i := 1; i < attempts; i++ {
		d = eb.NextBackOff()
	}
	return min(d, b.Max)
}
