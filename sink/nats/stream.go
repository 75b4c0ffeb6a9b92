package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ConfigError is a consumer configuration that cannot work with the server's
// stream: start-up stops with it. Key is the configuration key under the
// consumer (nats.stream, nats.duplicate_window, ...).
type ConfigError struct {
	Consumer string
	Key      string
	Reason   string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("consumer %q: %s: %s", e.Consumer, e.Key, e.Reason)
}

func (c *Consumer) configErr(key, format string, args ...any) error {
	return &ConfigError{Consumer: c.name, Key: key, Reason: fmt.Sprintf(format, args...)}
}

func retentionPolicy(s string) (jetstream.RetentionPolicy, error) {
	switch s {
	case "", "limits":
		return jetstream.LimitsPolicy, nil
	case "interest":
		return jetstream.InterestPolicy, nil
	case "workqueue":
		return jetstream.WorkQueuePolicy, nil
	}
	return 0, fmt.Errorf("%q is not one of limits, interest, workqueue", s)
}

// prepareStream creates or updates the stream (create_stream: true) or
// checks that the existing one covers every subject the template produces
// and de-duplicates over at least the configured window. Problems of
// configuration are *ConfigError; anything else (timeouts, connection) is
// transient.
func (c *Consumer) prepareStream(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*c.cfg.Timeout)
	defer cancel()
	if _, err := c.js.AccountInfo(ctx); errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return c.configErr("nats.url", "JetStream is not enabled on %s (start nats-server with -js): %v", c.shownURL, err)
	} else if err != nil {
		return fmt.Errorf("nats: JetStream account info from %s: %w", c.shownURL, err)
	}
	s, err := c.js.Stream(ctx, c.cfg.Stream)
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		if !c.cfg.CreateStream {
			return c.configErr("nats.stream", "stream %q does not exist on %s; create it with subjects %q and a duplicate window of at least %s, or set nats.create_stream: true",
				c.cfg.Stream, c.shownURL, c.subject.StreamSubject(), c.cfg.DuplicateWindow)
		}
		return c.createStream(ctx)
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return c.configErr("nats.url", "JetStream is not enabled on %s: %v", c.shownURL, err)
	case errors.Is(err, jetstream.ErrInvalidStreamName):
		return c.configErr("nats.stream", "%q is not a valid stream name: %v", c.cfg.Stream, err)
	case errors.As(err, &apiErr) && apiErr.Code < 500:
		return c.configErr("nats.stream", "looking up stream %q: %v", c.cfg.Stream, err)
	case err != nil:
		return fmt.Errorf("nats: look up stream %q on %s: %w", c.cfg.Stream, c.shownURL, err)
	}
	info := s.CachedInfo()
	if c.cfg.CreateStream {
		return c.updateStream(ctx, info.Config)
	}
	return c.checkStream(info.Config)
}

func (c *Consumer) createStream(ctx context.Context) error {
	ret, err := retentionPolicy(c.cfg.Retention)
	if err != nil {
		return c.configErr("nats.retention", "%v", err)
	}
	sc := jetstream.StreamConfig{
		Name:        c.cfg.Stream,
		Description: "searchsync outbox events (" + c.subject.String() + ")",
		Subjects:    []string{c.subject.StreamSubject()},
		Retention:   ret,
		Storage:     jetstream.FileStorage,
		Duplicates:  c.cfg.DuplicateWindow,
		MaxAge:      c.cfg.MaxAge,
	}
	if _, err := c.js.CreateStream(ctx, sc); err != nil {
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // created meanwhile by another relay
			s, err := c.js.Stream(ctx, c.cfg.Stream)
			if err != nil {
				return fmt.Errorf("nats: look up stream %q: %w", c.cfg.Stream, err)
			}
			return c.updateStream(ctx, s.CachedInfo().Config)
		}
		return c.streamAPIErr("creating", err)
	}
	c.logger.Info("nats: created stream", "stream", sc.Name, "subjects", sc.Subjects, "retention", c.cfg.Retention,
		"duplicate_window", sc.Duplicates.String(), "max_age", sc.MaxAge.String())
	return nil
}

// updateStream brings an existing stream in line with the configuration:
// adds the template's subjects when they are not covered, and sets the
// duplicate window and max age. The retention of an existing stream is not
// changed: a mismatch is an error.
func (c *Consumer) updateStream(ctx context.Context, sc jetstream.StreamConfig) error {
	ret, err := retentionPolicy(c.cfg.Retention)
	if err != nil {
		return c.configErr("nats.retention", "%v", err)
	}
	if sc.Retention != ret {
		return c.configErr("nats.retention", "stream %q exists with retention %s, configured %s; JetStream cannot change it in place (delete the stream or change nats.retention)",
			sc.Name, sc.Retention, ret)
	}
	changed := false
	if len(uncovered(sc.Subjects, c.subject.Shapes())) > 0 {
		sc.Subjects = append(sc.Subjects, c.subject.StreamSubject())
		changed = true
	}
	if sc.Duplicates != c.cfg.DuplicateWindow {
		sc.Duplicates = c.cfg.DuplicateWindow
		changed = true
	}
	if sc.MaxAge != c.cfg.MaxAge {
		sc.MaxAge = c.cfg.MaxAge
		changed = true
	}
	if !changed {
		return nil
	}
	if _, err := c.js.UpdateStream(ctx, sc); err != nil {
		return c.streamAPIErr("updating", err)
	}
	c.logger.Info("nats: updated stream", "stream", sc.Name, "subjects", sc.Subjects,
		"duplicate_window", sc.Duplicates.String(), "max_age", sc.MaxAge.String())
	return nil
}

// checkStream verifies a stream searchsync does not manage.
func (c *Consumer) checkStream(sc jetstream.StreamConfig) error {
	if miss := uncovered(sc.Subjects, c.subject.Shapes()); len(miss) > 0 {
		return c.configErr("nats.subject", "stream %q has subjects %q, which do not cover %q produced by the template %q; add %q to the stream or change nats.subject",
			sc.Name, sc.Subjects, strings.Join(miss, ", "), c.subject.String(), c.subject.StreamSubject())
	}
	if sc.Duplicates < c.cfg.DuplicateWindow {
		return c.configErr("nats.duplicate_window", "stream %q de-duplicates over %s, less than the configured %s: redeliveries of an event (same Nats-Msg-Id) after a relay crash would be stored twice; raise the stream's duplicate window",
			sc.Name, sc.Duplicates, c.cfg.DuplicateWindow)
	}
	if sc.Sealed {
		return c.configErr("nats.stream", "stream %q is sealed and takes no messages", sc.Name)
	}
	return nil
}

// streamAPIErr classifies an error of a stream create/update: the server
// refusing the configuration is a ConfigError, the rest is transient.
func (c *Consumer) streamAPIErr(verb string, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.Code < 500 {
		return c.configErr("nats.stream", "%s stream %q (subjects %q, duplicate window %s): the server refused: %s",
			verb, c.cfg.Stream, c.subject.StreamSubject(), c.cfg.DuplicateWindow, apiErr.Description)
	}
	return fmt.Errorf("nats: %s stream %q: %w", verb, c.cfg.Stream, err)
}

// minDuplicateWindow is the shortest window New accepts at all (the
// configuration asks for 2 × relay.lease_ttl, which it checks itself).
const minDuplicateWindow = time.Second
