package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// startup is the HTTP side of `run` before the relay runs: the listener is
// bound and served at once, so that /healthz, /readyz and the console's
// address answer while run waits for PostgreSQL, the search engine or NATS.
// /readyz (503) and every other path say what it waits for and since when;
// once the relay is built, serve hands the listener to the full handler.
type startup struct {
	ln      net.Listener
	srv     *http.Server
	served  chan error
	handler atomic.Pointer[http.Handler]

	mu    sync.Mutex
	what  string
	since time.Time
}

// listenEarly binds addr and serves the start-up answers on it.
func listenEarly(addr string) (*startup, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http.listen %s: %w", addr, err)
	}
	s := &startup{ln: ln, served: make(chan error, 1), what: "starting", since: time.Now()}
	early := http.Handler(http.HandlerFunc(s.serveStarting))
	s.handler.Store(&early)
	s.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*s.handler.Load()).ServeHTTP(w, r) })}
	go func() { s.served <- s.srv.Serve(ln) }()
	return s, nil
}

// waiting records what the start-up waits for now.
func (s *startup) waiting(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if what != s.what {
		s.what, s.since = what, time.Now()
	}
}

// state is what the start-up waits for and since when, as a sentence.
func (s *startup) state() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%s since %s (%s)", s.what, s.since.Format(time.TimeOnly), time.Since(s.since).Round(time.Second))
}

func (s *startup) serveStarting(w http.ResponseWriter, r *http.Request) {
	state := s.state()
	switch {
	case r.URL.Path == "/healthz":
		fmt.Fprintf(w, "ok: starting: %s\n", state)
	case r.URL.Path == "/readyz":
		http.Error(w, "not ready: starting: "+state, http.StatusServiceUnavailable)
	case strings.HasPrefix(r.URL.Path, "/api/"):
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "starting: " + state}) // the client went away: nothing to do
	default:
		http.Error(w, "searchsync is starting: "+state, http.StatusServiceUnavailable)
	}
}

// serve hands the listener to h, the relay's full handler.
func (s *startup) serve(h http.Handler) { s.handler.Store(&h) }

// addr is the listener's address.
func (s *startup) addr() string { return s.ln.Addr().String() }

// run serves until ctx is done, then shuts the server down (waiting at most
// 5s for the requests in progress): the supervisor's HTTP actor.
func (s *startup) run(ctx context.Context) error {
	select {
	case err := <-s.served:
		return fmt.Errorf("serve %s: %w", s.ln.Addr(), err)
	case <-ctx.Done():
	}
	return s.shutdown(context.WithoutCancel(ctx))
}

// shutdown stops serving (also when the start-up fails).
func (s *startup) shutdown(ctx context.Context) error {
	shutCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(shutCtx)
	if err != nil {
		err = s.srv.Close()
	}
	if serr := <-s.served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	return err
}
