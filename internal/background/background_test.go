package background

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// run runs l in a bubble for d of fake time and returns the times of its
// turns, counted from the start.
func run(t *testing.T, l Loop, d time.Duration) []time.Duration {
	t.Helper()
	var turns []time.Duration
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		turn := l.Turn
		l.Turn = func(ctx context.Context) error {
			turns = append(turns, time.Since(start))
			if turn == nil {
				return nil
			}
			return turn(ctx)
		}
		ctx, cancel := context.WithTimeout(t.Context(), d)
		defer cancel()
		l.Run(ctx)
	})
	return turns
}

func TestLoopTiming(t *testing.T) {
	t.Parallel()
	sec := time.Second
	cases := []struct {
		name string
		loop Loop
		want []time.Duration
	}{
		{"after an interval", Loop{Interval: sec}, []time.Duration{sec, 2 * sec, 3 * sec}},
		{"at once", Loop{Interval: sec, Immediate: true}, []time.Duration{0, sec, 2 * sec, 3 * sec}},
		{"paced by the turn", Loop{Interval: sec, Immediate: true,
			Turn: func(context.Context) error { time.Sleep(sec); return nil },
			Pace: func(took time.Duration) time.Duration { return 2 * took }}, []time.Duration{0, 2 * sec}},
		{"a long turn is followed at once", Loop{Interval: sec, Immediate: true,
			Turn: func(context.Context) error { time.Sleep(2 * sec); return nil }}, []time.Duration{0, 2 * sec}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := run(t, c.loop, 3*time.Second+time.Millisecond)
			if !slices.Equal(got, c.want) {
				t.Fatalf("turns at %v, want %v", got, c.want)
			}
		})
	}
}

func TestLoopLogsFailures(t *testing.T) {
	t.Parallel()
	outcomes := []error{errors.New("down"), errors.New("down"), nil, errors.New("down")}
	for _, c := range []struct {
		name string
		loop Loop
		want string
	}{
		{"every turn", Loop{Failed: "turn failed"}, "WARN turn failed|WARN turn failed|WARN turn failed"},
		{"once until it recovers", Loop{Failed: "turn failed", FailedAgain: "again", Recovered: "recovered"},
			"WARN turn failed|DEBUG again|INFO recovered|WARN turn failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			l := c.loop
			l.Interval, l.Immediate = time.Second, true
			l.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug,
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey || a.Key == "err" {
						return slog.Attr{}
					}
					return a
				}}))
			n := 0
			l.Turn = func(context.Context) error { n++; return outcomes[min(n, len(outcomes))-1] }
			run(t, l, 3*time.Second+time.Millisecond)
			got := strings.NewReplacer("level=", "", "msg=", "", "\"", "").Replace(strings.TrimSpace(buf.String()))
			if got = strings.ReplaceAll(got, "\n", "|"); got != c.want {
				t.Fatalf("logged %q, want %q", got, c.want)
			}
		})
	}
}

// A turn that fails because the service is stopping is not logged.
func TestLoopStopsQuietly(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := Loop{Interval: time.Second, Immediate: true, Failed: "turn failed", Logger: slog.New(slog.NewTextHandler(&buf, nil)),
		Turn: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }}
	if turns := run(t, l, time.Second); len(turns) != 1 || buf.Len() != 0 {
		t.Fatalf("turns %v, logged %q; want one turn, nothing logged", turns, buf.String())
	}
}
