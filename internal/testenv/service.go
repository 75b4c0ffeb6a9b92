package testenv

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// serviceWait is how long a service's check is retried: a loaded machine
// (CI runs many test binaries beside JVMs) answers a health check late.
const serviceWait = 90 * time.Second

// permanent marks a check's error that waiting cannot cure (a variable not
// set, a file missing): the check is not retried.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// service returns the accessor of one test service: find runs once per
// test binary, again every second while it fails for up to serviceWait
// (unless its error is permanent), and every test that asks gets what it
// found, or fails with what (the accessor's subject), why and hint.
func service[T any](what, hint string, find func() (T, error)) func(testing.TB) T {
	found := sync.OnceValues(func() (T, error) {
		deadline := time.Now().Add(serviceWait)
		for {
			v, err := find()
			var p permanent
			if err == nil || errors.As(err, &p) || time.Now().After(deadline) {
				return v, err
			}
			time.Sleep(time.Second) // the next health check of a service still starting or slow
		}
	})
	return func(t testing.TB) T {
		t.Helper()
		v, err := found()
		if err != nil {
			t.Fatalf("testenv: %s: %v; %s", what, err, hint)
		}
		return v
	}
}
