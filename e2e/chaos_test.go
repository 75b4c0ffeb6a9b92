package e2e_test

import (
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/sink"
)

// TestThreeRelaysKilledWhileConsumersComeAndGo: three `searchsync run`
// processes; every 5 s one of them is killed with SIGKILL and started again,
// while the engine and the endpoint go down and up in turn, under steady
// load. Afterwards nothing is lost (every consumer holds every event) and no
// consumer saw an aggregate out of order (first arrivals at the endpoint,
// first appearances in the stream, final versions in the index).
func TestThreeRelaysKilledWhileConsumersComeAndGo(t *testing.T) {
	t.Parallel()
	w := newWorld(t, shortForm)
	procs := []*proc{w.runSlot(0, "relay-0"), w.runSlot(1, "relay-1"), w.runSlot(2, "relay-2")}
	stop := w.produce(150)
	// "Follows": holds what was committed 5 s ago (on a loaded machine the
	// relay runs seconds behind a steady load).
	testenv.Eventually(t, 120*time.Second, func() bool { return len(w.behind(time.Now().Add(-5*time.Second))) == 0 },
		"every consumer follows before the chaos")

	began := time.Now()
	kills := 0
	for step := 0; time.Since(began) < 60*time.Second; step++ {
		// Consumers: the engine down for 10 s of every 20, the endpoint
		// down for 10 s of every 20, shifted by 10 s.
		switch step % 4 {
		case 0:
			w.engine.Down()
		case 1:
			w.engine.Up()
			w.hookNet.Down()
		case 2:
			w.hookNet.Up()
		}
		// Relays: one killed and restarted every 5 s.
		i := step % len(procs)
		procs[i].cmd.Process.Signal(syscall.SIGKILL)
		<-procs[i].done
		kills++
		time.Sleep(200 * time.Millisecond) // a restart is not instantaneous in production either
		procs[i] = w.runSlot(i, fmt.Sprintf("relay-%d-restart-%d", i, step))
		time.Sleep(5 * time.Second) // the chaos period
	}
	w.engine.Up()
	w.hookNet.Up()
	stop()

	testenv.Eventually(t, 180*time.Second, func() bool { return len(w.behind(time.Now())) == 0 },
		"every consumer holds every event (behind: %v)", w.behind(time.Now()))
	testenv.Eventually(t, 60*time.Second, func() bool {
		return w.count(`SELECT count(*) FROM aa_outbox_event WHERE status <> 'dispatched'`) == 0
	}, "every event dispatched")
	if n := w.count(`SELECT count(*) FROM aa_outbox_event WHERE status = 'failed'`); n != 0 {
		t.Errorf("%d events failed", n)
	}
	if n, which := w.hook.outOfOrder(); n != 0 {
		t.Errorf("%d aggregates reached the endpoint out of order (first arrivals): %v", n, which)
	}
	// The stream: first appearances per aggregate in stream order.
	msgs, err := natsMessages(w)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	last := map[string]int64{}
	bad := 0
	for _, m := range msgs {
		if seen[m.ID] || m.AggregateID == nil {
			continue
		}
		seen[m.ID] = true
		k := m.AggregateID.String()
		if m.ID < last[k] {
			bad++
		}
		last[k] = m.ID
	}
	if bad != 0 {
		t.Errorf("%d events appeared in the stream before an earlier event of their aggregate", bad)
	}
	ids, versions := w.committed(time.Now())
	iv := w.indexVersions()
	for agg, v := range versions {
		if iv[agg] != v {
			t.Errorf("customer %s: index version %d, outbox %d", agg, iv[agg], v)
			break
		}
	}
	t.Logf("%d events, %d kills; endpoint duplicates %d (at-least-once across kills)", len(ids), kills, w.hook.duplicates())
}

func natsMessages(w *world) ([]sink.Message, error) {
	raw, err := natstestRead(w)
	if err != nil {
		return nil, err
	}
	out := make([]sink.Message, 0, len(raw))
	for _, b := range raw {
		var m sink.Message
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}
