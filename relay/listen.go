package relay

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/outbox"
)

// listen LISTENs on the outbox channel and wakes the worker on every
// notification, reconnecting with backoff.
//
// A lost connection is logged once (WARN) and its return once (INFO); the
// attempts in between only at debug level.
func (r *Relay) listen(ctx context.Context) {
	bo := newWaitBackoff()
	channel := outbox.Channel(r.cfg.Schema)
	lost := false
	listening := func() {
		bo.Reset()
		if lost {
			r.cfg.Logger.Info("relay: LISTEN connection back", "channel", channel)
			lost = false
		}
	}
	for ctx.Err() == nil {
		err := r.listenOnce(ctx, channel, listening)
		if ctx.Err() != nil {
			return
		}
		d := bo.NextBackOff()
		if !lost {
			r.cfg.Logger.Warn("relay: LISTEN connection lost; polling meanwhile (logged again when it is back)", "channel", channel, "error", err)
			lost = true
		} else {
			r.cfg.Logger.Debug("relay: LISTEN still failing", "channel", channel, "error", err, "retry_in", d.Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
		case <-time.After(d):
		case <-r.leases.back:
			// The database is back: listen now, not after d of polling.
		}
	}
}

func (r *Relay) listenOnce(ctx context.Context, channel string, listening func()) error {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer func() {
		// A connection that was LISTENing is not returned to the pool.
		c := conn.Hijack()
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	listening()
	r.notified() // anything notified while we were not listening
	for {
		if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
			return err
		}
		r.notified()
	}
}
