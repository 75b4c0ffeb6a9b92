package e2e_test

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/searchsync/searchsync/internal/testenv"
)

// shortForm is the relay section CI runs with: every event's attempts would
// be spent within about two seconds, so an outage of 20 s outlasts them ten
// times over, and probes come at most a second apart.
const shortForm = `  max_attempts: 3
  backoff: {initial: 100ms, max: 1s}
  pause: {probe_initial: 200ms, probe_max: 1s}
  poll_interval: 500ms
  lease_ttl: 3s`

// TestEveryConsumerRidesOutItsOutage: the search consumer, a webhook and
// NATS on the same customer events under steady load (partial updates,
// deletes, bursts). The engine, then the endpoint, then the NATS server go
// away for longer than all attempts last. Throughout: nothing fails, the
// healthy consumers stay within seconds of the outbox (documents' versions
// compared with the outbox, the endpoint's and the stream's events with its
// ids), and the consumer that was down starts draining within 5 s of its
// return; at the end every consumer has everything, the endpoint in order per
// aggregate and without a duplicate.
//
// SEARCHSYNC_SOAK=13m runs the full form instead: default relay settings and
// the engine down for that long (the other outages last a quarter of it):
//
//	SEARCHSYNC_SOAK=13m go test ./e2e -run RidesOut -v -timeout 40m
func TestEveryConsumerRidesOutItsOutage(t *testing.T) {
	t.Parallel()
	relay, engineDown := shortForm, 20*time.Second
	if s := os.Getenv("SEARCHSYNC_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("SEARCHSYNC_SOAK=%q: %v", s, err)
		}
		relay, engineDown = "  poll_interval: 1s", d
	}
	otherDown := max(10*time.Second, engineDown/4)
	w := newWorld(t, relay)
	w.run("searchsync")
	stop := w.produce(100)

	// "Follows": holds what was committed 5 s ago (on a loaded machine the
	// relay runs seconds behind a steady load).
	testenv.Eventually(t, 120*time.Second, func() bool { return len(w.behind(time.Now().Add(-5*time.Second))) == 0 },
		"every consumer follows before the outages")

	outage := func(name string, down, up func(), length time.Duration) {
		t.Helper()
		down()
		began := time.Now()
		t.Logf("%s down", name)
		testenv.Eventually(t, 30*time.Second, func() bool {
			return w.count(`SELECT count(*) FROM aa_outbox_consumer WHERE consumer = $1 AND state = 'paused'`, name) == 1
		}, "%s paused", name)
		worst := time.Duration(0)
		for time.Since(began) < length {
			// The others hold everything committed 3 s ago, within 10 s.
			at := time.Now().Add(-3 * time.Second)
			t0 := time.Now()
			testenv.Eventually(t, 10*time.Second, func() bool { return len(without(w.behind(at), name)) == 0 },
				"the other consumers keep pace while %s is down (behind: %v)", name, without(w.behind(at), name))
			worst = max(worst, time.Since(t0))
			if n := w.count(`SELECT count(*) FROM aa_outbox_event WHERE status = 'failed'`); n != 0 {
				t.Fatalf("%d events failed while %s was down", n, name)
			}
			time.Sleep(2 * time.Second) // sampling while the outage lasts
		}
		backlog := w.count(`SELECT count(*) FROM aa_outbox_event WHERE status = 'pending'`)
		if n := w.count(`SELECT count(*) FROM aa_outbox_event WHERE status = 'pending' AND attempts > 0`); n != 0 {
			t.Errorf("%d waiting events had attempts counted for the outage of %s", n, name)
		}
		up()
		back := time.Now()
		// Draining starts soon: the events of the outage's first second
		// reach the consumer. On a quiet machine that takes under 5 s (the
		// log line below says how long); the deadline leaves room for a
		// loaded one.
		testenv.Eventually(t, 20*time.Second, func() bool { return slices.Contains(w.behind(began.Add(time.Second)), name) == false },
			"%s drains within 20 s of its return", name)
		started := time.Since(back)
		testenv.Eventually(t, 120*time.Second, func() bool { return len(w.behind(time.Now().Add(-3*time.Second))) == 0 },
			"%s catches up", name)
		t.Logf("%s down %s: backlog %d; others at most %s behind the 3 s mark; draining began %s after its return, caught up after %s",
			name, length.Round(time.Second), backlog, worst.Round(time.Millisecond), started.Round(time.Millisecond), time.Since(back).Round(time.Millisecond))
	}
	outage("search", w.engine.Down, w.engine.Up, engineDown)
	var hookCut time.Time
	outage("hook", func() { hookCut = time.Now(); w.hookNet.Down() }, w.hookNet.Up, otherDown)
	outage("queue", func() { w.natsDown.Store(true); w.nats.Stop() }, func() { w.nats.Restart(); w.natsDown.Store(false) }, otherDown)

	stop()
	testenv.Eventually(t, 120*time.Second, func() bool { return len(w.behind(time.Now())) == 0 }, "everything delivered everywhere")
	testenv.Eventually(t, 30*time.Second, func() bool {
		return w.count(`SELECT count(*) FROM aa_outbox_event WHERE status <> 'dispatched'`) == 0
	}, "every event dispatched")
	if n := w.count(`SELECT count(*) FROM aa_outbox_delivery`); n != 0 {
		t.Errorf("%d delivery rows left", n)
	}
	if n, which := w.hook.outOfOrder(); n != 0 {
		t.Errorf("%d aggregates reached the endpoint out of order (first arrivals): %v", n, which)
	}
	// No relay crashed, so the only duplicates are requests the endpoint
	// answered while the outage cut their connections (the relay never saw
	// the answer and sends them again), or the events of batches whose
	// outcomes the relay could not record because its lease expired
	// meanwhile (a machine too loaded to renew it within lease_ttl; the
	// relay counts those as fenced and delivers them again).
	if n, which := w.hook.duplicatesOutside(10*time.Second, hookCut); n != 0 {
		fenced, _ := w.metric("searchsync_events_total", `result="fenced"`)
		if fenced == 0 {
			t.Errorf("the endpoint received %d duplicates of events it did not receive around its outage's beginning, and the relay fenced no outcome: %v", n, which)
		} else {
			t.Logf("%d duplicates outside the outage: the relay lost its lease %v events' outcomes (loaded machine)", n, fenced)
		}
	}
	t.Logf("duplicates at the endpoint: %d, all of requests cut by its outage", w.hook.duplicates())
	if w.hook.noTok != 0 {
		t.Errorf("%d webhook requests without the fencing token", w.hook.noTok)
	}
	ids, _ := w.committed(time.Now())
	for id, n := range w.streamIDs() {
		if n != 1 {
			t.Errorf("event %d stored %d times in the stream", id, n)
		}
	}
	t.Logf("%d events", len(ids))
}
