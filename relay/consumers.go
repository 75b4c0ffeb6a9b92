package relay

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/sink"
)

// consumers is the relay's set of distinct consumers (routes naming the same
// consumer share it) and its view of their pause state, which lives in
// aa_outbox_consumer so that every relay pauses and resumes a consumer
// together (docs/consumers.md).
type consumers struct {
	r     *Relay
	list  []sink.Consumer // index = consumer index
	names []string        // their names, by index
	// ofRoute[ri] is the consumer index of route ri.
	ofRoute []int

	mu    sync.Mutex
	state []pauseState // by consumer index
	// noProbe: the consumer's Probe said sink.ErrNoProbe (a wrapper of a
	// consumer without one): its next batch is the probe.
	noProbe []bool
	// kick makes run release held events at once (a consumer resumed).
	kick chan struct{}
	// gen counts this relay's own pauses and resumes, by consumer index,
	// and writing those whose write to aa_outbox_consumer is still under
	// way: a refresh whose read overlapped one (gen moved meanwhile, or a
	// write not yet committed) leaves that consumer alone, since what it
	// read may be older than this relay's own change.
	gen     []uint64
	writing []int
	// releaseFailing: the last release of consumer ci's held events failed
	// (logged once, until one succeeds). The run goroutine only.
	releaseFailing []bool
}

// pauseState is one consumer's pause as this relay knows it.
type pauseState struct {
	paused bool
	// probing: a consumer without Probe whose probe is due; it is given
	// events again, and its next answer resumes or pauses it.
	probing bool
	// probeSent is when the last probe batch was released.
	probeSent time.Time
	// probeAt is when the next probe is due (local clock).
	probeAt time.Time
	// probeRunning: a Probe call is under way.
	probeRunning bool
	since        time.Time
	reason       string
}

func newConsumers(r *Relay) *consumers {
	c := &consumers{r: r, ofRoute: make([]int, len(r.cfg.Routes)), names: []string{}}
	byName := map[string]int{}
	for ri, rt := range r.cfg.Routes {
		ci, ok := byName[rt.Consumer.Name()]
		if !ok {
			ci = len(c.list)
			byName[rt.Consumer.Name()] = ci
			c.list = append(c.list, rt.Consumer)
		}
		c.ofRoute[ri] = ci
	}
	for _, cons := range c.list {
		c.names = append(c.names, cons.Name())
	}
	c.state = make([]pauseState, len(c.list))
	c.noProbe = make([]bool, len(c.list))
	c.gen = make([]uint64, len(c.list))
	c.writing = make([]int, len(c.list))
	c.releaseFailing = make([]bool, len(c.list))
	c.kick = make(chan struct{}, 1)
	return c
}

// name is the name of consumer ci.
func (c *consumers) name(ci int) string { return c.list[ci].Name() }

// paused reports whether consumer ci is paused (probing or not).
func (c *consumers) paused(ci int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state[ci].paused
}

// heldNow is the consumers that must not be given events now, by index and
// by name (for the claim, which leaves out events that only they still owe).
func (c *consumers) heldNow() ([]bool, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	held := make([]bool, len(c.list))
	names := []string{}
	for ci, s := range c.state {
		if s.paused && !s.probing {
			held[ci] = true
			names = append(names, c.list[ci].Name())
		}
	}
	return held, names
}

// pause records that consumer ci cannot deliver (reason) and schedules its
// next probe, not before retryAfter (what the remote end asked for); every
// relay stops giving it events within a second.
func (c *consumers) pause(ctx context.Context, ci int, reason string, retryAfter time.Duration) {
	cfg := &c.r.cfg
	c.mu.Lock()
	s := &c.state[ci]
	first := !s.paused
	c.gen[ci]++
	c.writing[ci]++
	s.paused, s.probing, s.reason = true, false, reason
	if first {
		s.since = time.Now()
		s.probeAt = time.Now().Add(max(cfg.Pause.ProbeInitial, retryAfter))
	}
	c.mu.Unlock()
	if first {
		cfg.Logger.Warn("relay: consumer unavailable; paused, probing it (no event's attempts move, none is marked failed for this)",
			"consumer", c.name(ci), "reason", reason, "probe_in", cfg.Pause.ProbeInitial)
	} else {
		cfg.Logger.Debug("relay: consumer still unavailable", "consumer", c.name(ci), "reason", reason)
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := c.r.pool.Exec(pctx, c.r.q.pause, c.name(ci), reason, cfg.Pause.ProbeInitial.Milliseconds(),
		cfg.Pause.ProbeMax.Milliseconds(), cfg.InstanceID, retryAfter.Milliseconds()); err != nil {
		cfg.Logger.Warn("relay: record consumer pause", "consumer", c.name(ci), "error", err)
	}
	c.bump(ci)
	if err := c.refresh(pctx); err != nil && pctx.Err() == nil {
		cfg.Logger.Debug("relay: read consumer states", "error", err)
	}
}

// resume sets consumer ci running (its probe or a delivery succeeded) and
// wakes the relay; the others read it within a second.
func (c *consumers) resume(ctx context.Context, ci int, why string) {
	cfg := &c.r.cfg
	c.mu.Lock()
	s := &c.state[ci]
	was, since := s.paused, s.since
	*s = pauseState{}
	c.gen[ci]++
	c.writing[ci]++
	c.mu.Unlock()
	if was {
		cfg.Logger.Info("relay: consumer available again; resumed", "consumer", c.name(ci), "how", why,
			"paused_for", time.Since(since).Round(time.Millisecond))
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := c.r.pool.Exec(rctx, c.r.q.resume, c.name(ci), cfg.InstanceID, outbox.Channel(cfg.Schema)); err != nil {
		cfg.Logger.Warn("relay: record consumer resume", "consumer", c.name(ci), "error", err)
	}
	c.bump(ci)
	select {
	case c.kick <- struct{}{}:
	default:
	}
	c.r.Wake()
}

// bump marks the write of consumer ci's local change done (committed or
// failed): the counterpart of the gen and writing increments made with the
// change.
func (c *consumers) bump(ci int) {
	c.mu.Lock()
	c.gen[ci]++
	c.writing[ci]--
	c.mu.Unlock()
}

// releaseChunk is how many held events one statement releases.
const releaseChunk = 5000

// release makes up to n events held for consumer ci available again, in id
// order, and returns how many it released.
func (c *consumers) release(ctx context.Context, ci int, n int) (int, error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var got int
	err := c.r.pool.QueryRow(rctx, c.r.q.releaseHeld, c.name(ci), n).Scan(&got)
	return got, err
}

// releaseAll releases every event held for consumer ci (running again), a
// chunk at a time, waking the relay after each.
func (c *consumers) releaseAll(ctx context.Context, ci int) {
	total := 0
	for ctx.Err() == nil {
		n, err := c.release(ctx, ci, releaseChunk)
		if err != nil {
			switch {
			case ctx.Err() != nil:
			case !c.releaseFailing[ci]:
				c.r.cfg.Logger.Warn("relay: release events held for a paused consumer (retried every second; not logged again until one works)",
					"consumer", c.name(ci), "error", err)
				c.releaseFailing[ci] = true
			default:
				c.r.cfg.Logger.Debug("relay: release events held for a paused consumer", "consumer", c.name(ci), "error", err)
			}
			return
		}
		c.releaseFailing[ci] = false
		total += n
		if n > 0 {
			c.r.Wake()
		}
		if n < releaseChunk || c.paused(ci) {
			break
		}
	}
	if total > 0 {
		c.r.cfg.Logger.Info("relay: released the events held while the consumer was paused", "consumer", c.name(ci), "events", total)
	}
}

// orphanSweepEvery is how often a relay looks for outbox rows held for no
// consumer. Acks keep a held outbox row's held delivery rows in the same
// statement, so the sweep is a safety net (it logs what it finds, which
// would be a bug); it reads every held row, so it is not made every second.
const orphanSweepEvery = time.Minute

// unholdOrphans makes available the outbox rows left held with no held
// delivery row (see unholdOrphansSQL), waking the relay when it found any.
func (c *consumers) unholdOrphans(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tag, err := c.r.pool.Exec(rctx, c.r.q.unholdOrphans, releaseChunk)
	if err != nil {
		if ctx.Err() == nil {
			c.r.cfg.Logger.Debug("relay: release orphaned held events", "error", err)
		}
		return
	}
	if n := tag.RowsAffected(); n > 0 {
		c.r.cfg.Logger.Warn("relay: released events held for no consumer (a bug: please report it)", "events", n)
		c.r.Wake()
	}
}

// refresh reads the pause states of aa_outbox_consumer: a pause or resume
// by another relay, and the probe times.
func (c *consumers) refresh(ctx context.Context) error {
	c.mu.Lock()
	gen := slices.Clone(c.gen)
	c.mu.Unlock()
	rows, err := c.r.pool.Query(ctx, c.r.q.consumerStates)
	if err != nil {
		return err
	}
	defer rows.Close()
	type row struct {
		paused  bool
		probeMs int64
		reason  string
	}
	got := map[string]row{}
	for rows.Next() {
		var name string
		var x row
		if err := rows.Scan(&name, &x.paused, &x.probeMs, &x.reason); err != nil {
			return err
		}
		got[name] = x
	}
	if err := rows.Err(); err != nil {
		return err
	}
	now := time.Now()
	wake := false
	c.mu.Lock()
	for ci := range c.list {
		if c.gen[ci] != gen[ci] || c.writing[ci] > 0 {
			// Paused or resumed here while the states were read, or the
			// change not written yet: what was read may be older than
			// this relay's own change.
			continue
		}
		s := &c.state[ci]
		x := got[c.name(ci)]
		switch {
		case x.paused && !s.paused:
			s.paused, s.since, s.reason = true, now, x.reason
			c.r.cfg.Logger.Info("relay: consumer paused by another relay", "consumer", c.name(ci), "reason", x.reason)
		case !x.paused && s.paused:
			*s = pauseState{}
			wake = true
			c.r.cfg.Logger.Info("relay: consumer resumed by another relay", "consumer", c.name(ci))
		}
		if s.paused {
			s.probeAt = now.Add(time.Duration(x.probeMs) * time.Millisecond)
		}
	}
	c.mu.Unlock()
	if wake {
		c.r.Wake()
	}
	return nil
}

// run keeps the pause states current and probes paused consumers when their
// probe is due, until ctx is done.
func (c *consumers) run(ctx context.Context) {
	if len(c.list) == 0 {
		return
	}
	every := min(c.r.cfg.PollInterval, time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	var lastSweep time.Time // the first sweep runs at start
	for {
		if err := c.refresh(ctx); err != nil && ctx.Err() == nil {
			c.r.cfg.Logger.Debug("relay: read consumer states", "error", err)
		}
		now := time.Now()
		for ci := range c.list {
			if !c.paused(ci) {
				// Running (again): what was held for it is released, here
				// or by the relay that resumed it.
				c.releaseAll(ctx, ci)
			}
			c.mu.Lock()
			s := &c.state[ci]
			prober, isProber := c.list[ci].(sink.Prober)
			isProber = isProber && !c.noProbe[ci]
			// A probe batch that brought no answer within probe_max is
			// released again: its events may have been held again by a
			// batch claimed before the probe (and none be left to give the
			// consumer once traffic stops), which left it paused for good.
			due := s.paused && !s.probeRunning && !now.Before(s.probeAt) &&
				(!s.probing || (!isProber && now.Sub(s.probeSent) >= c.r.cfg.Pause.ProbeMax))
			if due {
				if isProber {
					s.probeRunning = true
				} else {
					// Its next batch is the probe.
					s.probing, s.probeSent = true, now
				}
			}
			c.mu.Unlock()
			switch {
			case due && isProber:
				wg.Go(func() { c.probe(ctx, ci, prober) })
			case due:
				// The probe batch: the first held events, by id.
				if _, err := c.release(ctx, ci, c.r.cfg.BatchSize); err != nil && ctx.Err() == nil {
					c.r.cfg.Logger.Debug("relay: release a probe batch", "consumer", c.name(ci), "error", err)
				}
				c.r.Wake()
			}
		}
		if now.Sub(lastSweep) >= orphanSweepEvery {
			// After the releases, not before them: the sweep reads every
			// held row, which on a large backlog takes a while.
			c.unholdOrphans(ctx)
			lastSweep = now
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
	}
}

// probe asks a paused consumer whether it could deliver again.
func (c *consumers) probe(ctx context.Context, ci int, p sink.Prober) {
	defer func() {
		c.mu.Lock()
		c.state[ci].probeRunning = false
		c.mu.Unlock()
	}()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := p.Probe(pctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	if errors.Is(err, sink.ErrNoProbe) {
		c.mu.Lock()
		c.noProbe[ci], c.state[ci].probing = true, true
		c.mu.Unlock()
		c.r.Wake()
		return
	}
	if err != nil {
		c.pause(ctx, ci, "probe: "+err.Error(), 0)
		return
	}
	c.resume(ctx, ci, "probe succeeded")
}
