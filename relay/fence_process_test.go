package relay_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/internal/testenv"
)

// TestPausedRelaySendsNothingAfterItsLease: a relay stopped with SIGSTOP
// while its batch is in flight, for longer than lease_ttl, while a second
// relay takes its partitions over; then continued. Once continued it starts
// no request under its old leases: the receiver sees nothing from it with
// the epochs it held before the stop. Every request carries the token.
func TestPausedRelaySendsNothingAfterItsLease(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rc := newReceiver(t)
	rc.delay = 100 * time.Millisecond // batches stay in flight for a while
	aggs := make([]uuid.UUID, 100)
	for i := range aggs {
		aggs[i] = uuid.New()
	}
	produce(t, db, aggs, 3000, 4, 7)

	listenA := testenv.FreeAddr(t)
	a := startProc(t, "relay-a", writeConfig(t, db.URL, db.Schema, rc.URL, listenA, ""), listenA)
	testenv.Eventually(t, 60*time.Second, func() bool { return rc.distinct() >= 100 }, "relay a delivers")

	a.cmd.Process.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	// The epochs relay a held: those of every request that arrived so far.
	rc.mu.Lock()
	old := map[[2]int64]bool{}
	for _, r := range rc.requests {
		old[[2]int64{int64(r.partition), r.epoch}] = true
	}
	rc.mu.Unlock()

	listenB := testenv.FreeAddr(t)
	startProc(t, "relay-b", writeConfig(t, db.URL, db.Schema, rc.URL, listenB, ""), listenB)
	// b sends under new epochs once a's leases (2 s) expired.
	testenv.Eventually(t, 30*time.Second, func() bool {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		for _, r := range rc.requests {
			if r.at.After(stopped) && !old[[2]int64{int64(r.partition), r.epoch}] {
				return true
			}
		}
		return false
	}, "relay b sends under new epochs")
	// Keep a stopped well past its lease.
	for time.Since(stopped) < 5*time.Second {
		time.Sleep(100 * time.Millisecond) // a stays stopped for this long
	}
	a.cmd.Process.Signal(syscall.SIGCONT)
	resumed := time.Now()

	testenv.Eventually(t, 120*time.Second, func() bool { return rc.distinct() == 3000 }, "every event arrives (has %d)", rc.distinct())
	testenv.Eventually(t, 30*time.Second, func() bool { return countStatus(t, db, "dispatched") == 3000 }, "every event dispatched")
	rc.checkOrder(t)

	rc.mu.Lock()
	defer rc.mu.Unlock()
	late, untagged := 0, 0
	for _, r := range rc.requests {
		if r.partition < 0 {
			untagged++
			continue
		}
		if r.at.After(resumed) && old[[2]int64{int64(r.partition), r.epoch}] {
			if late < 5 {
				t.Errorf("event %d arrived %s after relay a resumed under its old lease (partition %d, epoch %d)",
					r.id, r.at.Sub(resumed).Round(time.Millisecond), r.partition, r.epoch)
			}
			late++
		}
	}
	if late > 0 {
		t.Errorf("%d requests under a lost lease after the resume", late)
	}
	if untagged > 0 {
		t.Errorf("%d of %d requests carried no fencing token", untagged, len(rc.requests))
	}
	t.Logf("%d requests; relay a stopped %s, resumed; %s", len(rc.requests), resumed.Sub(stopped).Round(time.Millisecond), fmt.Sprint(len(old), " old tokens"))
}
