package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/searchsync/searchsync/internal/background"
)

// An actor is one long-running part of `searchsync run`: it works until its
// context is done and returns only then (nil) or when it cannot go on (an
// error). Every actor is started through a supervisor, which owns its
// goroutine.
type actor struct {
	name string
	run  func(ctx context.Context) error
}

// serviceActors makes actors of background services, each named by its
// Name.
func serviceActors(services []background.Service) []actor {
	out := make([]actor, len(services))
	for i, s := range services {
		out[i] = actor{name: s.Name(), run: s.Run}
	}
	return out
}

// supervisor runs the actors of `searchsync run` in stages and stops the
// stages in the order they were started: the relay (stop claiming, finish
// or hand back the batches in flight, release the leases), then the
// background jobs, then the HTTP server; the caller closes the consumers and
// the pool after Wait, when no actor runs any more.
//
// Every actor is fatal: one that returns before it is stopped — with an
// error, with nil, or by panicking — stops the whole process in the same
// order, and Wait returns "<actor>: <error>". The actors that may fail for
// a while retry inside themselves (the relay waits out the database, the
// background jobs log a failed turn and try again at the next), so an actor
// that returns has a reason not to be restarted.
type supervisor struct {
	logger *slog.Logger

	mu       sync.Mutex
	stages   []*stage
	stopping bool
	failures chan error // first failures, buffered
	returned map[string]bool
}

// stage is a set of actors stopped together.
type stage struct {
	name   string
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newSupervisor(logger *slog.Logger) *supervisor {
	return &supervisor{logger: logger, failures: make(chan error, 1), returned: map[string]bool{}}
}

// start runs actors in a new stage whose context is derived from ctx
// without its cancellation: a stage ends only when the supervisor stops it.
func (s *supervisor) start(ctx context.Context, name string, actors ...actor) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	st := &stage{name: name, cancel: cancel}
	s.mu.Lock()
	s.stages = append(s.stages, st)
	for _, a := range actors {
		s.returned[a.name] = false
	}
	s.mu.Unlock()
	for _, a := range actors {
		st.wg.Go(func() {
			err := runActor(sctx, a)
			s.mu.Lock()
			s.returned[a.name] = true
			s.mu.Unlock()
			if sctx.Err() != nil {
				if err != nil && !errors.Is(err, context.Canceled) {
					s.logger.Warn("stopping: "+a.name+" ended with an error", "actor", a.name, "error", err)
				}
				return
			}
			if err == nil {
				err = errors.New("returned before it was stopped")
			}
			select {
			case s.failures <- fmt.Errorf("%s: %w", a.name, err):
			default: // another actor failed first
			}
		})
	}
}

// runActor runs a, turning a panic into an error so that the others still
// stop in order (the relay hands its leases back).
func runActor(ctx context.Context, a actor) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return a.run(ctx)
}

// wait blocks until ctx is done (SIGTERM/SIGINT) or an actor fails, calls
// beforeStop (the supervisor's user turns /readyz unready there), stops every
// stage in order and returns the failure, if any.
func (s *supervisor) wait(ctx context.Context, beforeStop func()) error {
	var failure error
	select {
	case <-ctx.Done():
	case failure = <-s.failures:
		s.logger.Error("stopping: an actor failed", "error", failure)
	}
	if beforeStop != nil {
		beforeStop()
	}
	s.stop()
	return failure
}

// stop stops the stages in the order they were started, each only after the
// previous one's actors have all returned. It is safe to call more than once.
func (s *supervisor) stop() {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	s.stopping = true
	stages := s.stages
	s.mu.Unlock()
	for _, st := range stages {
		start := time.Now()
		st.cancel()
		st.wg.Wait()
		s.logger.Debug("stopped "+st.name, "took", time.Since(start).Round(time.Millisecond))
	}
}

// running lists the actors that have not returned.
func (s *supervisor) running() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for name, done := range s.returned {
		if !done {
			out = append(out, name)
		}
	}
	return out
}
