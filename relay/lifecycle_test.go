package relay_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/relay"
)

// With a poll interval of an hour only NOTIFY can wake the relay; when idle
// it does not claim in a loop.
func TestWakesOnNotifyAndDoesNotSpinWhenIdle(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rc := newReceiver(t)
	cfg := fast()
	cfg.PollInterval = time.Hour
	cfg.Routes = []relay.Route{{Consumer: newHook("hook", rc.URL)}}
	r, _ := start(t, db, cfg)
	testenv.Eventually(t, 10*time.Second, func() bool { ok, _ := r.Ready(); return ok }, "ready")
	for i := range 3 {
		agg := uuid.New()
		id := write(t, db, event(&agg, "entity.customer.updated", "DDM_ENTITY", i))[0]
		testenv.Eventually(t, 15*time.Second, func() bool { return rc.delivered(id) }, "event %d delivered after NOTIFY", i)
	}
	// Idle: a quiet period of three lease heartbeats must not produce claims.
	// It starts once the last ack returned (Dispatched counts acked events)
	// and the claims that follow an ack, or a NOTIFY that arrived after the
	// claim it announced, are made: the count has not moved for 300 ms.
	testenv.Eventually(t, 15*time.Second, func() bool { return r.Stats().Dispatched >= 3 }, "the three events acked")
	before := r.Stats().Claims
	testenv.Eventually(t, 15*time.Second, func() bool {
		n := r.Stats().Claims
		if n != before {
			before = n
			return false
		}
		time.Sleep(300 * time.Millisecond)
		return r.Stats().Claims == before
	}, "the claims after the last ack never ended")
	deadline := time.Now().Add(1500 * time.Millisecond)
	testenv.Eventually(t, 5*time.Second, func() bool { return time.Now().After(deadline) }, "quiet period")
	if n := r.Stats().Claims - before; n > 2 {
		t.Errorf("%d claims while idle for 1.5s with poll_interval 1h, want at most 2", n)
	}
}

// SIGTERM (ctx cancelled) while a batch is delivered: the batch is finished
// and acked, the leases are released, Run returns nil.
func TestStopFinishesTheBatchInFlight(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	bh := &blockingHook{entered: make(chan struct{}, 10), release: make(chan struct{})}
	cfg := fast()
	cfg.Routes = []relay.Route{{Consumer: bh}}
	_, stop := start(t, db, cfg)
	agg := uuid.New()
	id := write(t, db, event(&agg, "entity.customer.updated", "DDM_ENTITY", 1))[0]
	select {
	case <-bh.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Run returned before the batch in flight was finished")
	case <-time.After(300 * time.Millisecond):
	}
	close(bh.release)
	<-stopped
	if got := getRow(t, db, id); got.Status != "dispatched" {
		t.Errorf("event of the batch in flight: %+v, want dispatched", got)
	}
	var held int
	db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM aa_relay_lease WHERE owner IS NOT NULL`).Scan(&held)
	if held != 0 {
		t.Errorf("%d leases still held after stop", held)
	}
}

// proxy is a TCP proxy in front of PostgreSQL that the test can cut.
type proxy struct {
	ln    net.Listener
	down  atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func newProxy(t testing.TB, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.down.Load() {
				c.Close()
				continue
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
	return p
}

func (p *proxy) cut() {
	p.down.Store(true)
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
}

func (p *proxy) restore() { p.down.Store(false) }

type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

func (l *syncLog) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.buf.String(), s)
}

// The database goes away while the relay runs: it waits with backoff, stops
// claiming once its leases can no longer be valid, marks nothing failed, and
// delivers everything once the database is back.
func TestWaitsOutALostDatabase(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rc := newReceiver(t)
	pc, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	px := newProxy(t, net.JoinHostPort(pc.ConnConfig.Host, strconv.Itoa(int(pc.ConnConfig.Port))))
	host, port, _ := net.SplitHostPort(px.ln.Addr().String())
	pc.ConnConfig.Host = host
	p, _ := strconv.Atoi(port)
	pc.ConnConfig.Port = uint16(p)
	pc.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	logs := &syncLog{}
	cfg := fast()
	cfg.Schema = db.Schema
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	cfg.Routes = []relay.Route{{Consumer: newHook("hook", rc.URL)}}
	r, err := relay.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	agg := uuid.New()
	first := write(t, db, event(&agg, "entity.customer.updated", "DDM_ENTITY", 0))[0]
	testenv.Eventually(t, 10*time.Second, func() bool { return getRow(t, db, first).Status == "dispatched" }, "dispatched before the cut")

	px.cut()
	var ids []int64
	for i := range 10 {
		a := uuid.New()
		ids = append(ids, write(t, db, event(&a, "entity.customer.updated", "DDM_ENTITY", i))...)
	}
	testenv.Eventually(t, 20*time.Second, func() bool {
		return logs.contains("database unavailable") && logs.contains("leases expired without renewal")
	}, "relay noticed the outage and fenced itself")
	if ok, _ := r.Ready(); ok {
		t.Error("ready while the database is away")
	}
	if n := countStatus(t, db, "pending"); n != 10 {
		t.Errorf("%d pending during the outage, want 10", n)
	}
	if n := countStatus(t, db, "failed"); n != 0 {
		t.Errorf("%d failed during the outage, want 0", n)
	}

	px.restore()
	testenv.Eventually(t, 30*time.Second, func() bool { return countStatus(t, db, "dispatched") == 11 }, "everything dispatched after the outage")
	for _, id := range ids {
		if got := getRow(t, db, id); got.Attempts != 0 {
			t.Errorf("event %d: %+v, want no attempt counted", id, got)
		}
	}
}
