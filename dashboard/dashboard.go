// Package dashboard owns the relay's operator console: one page (assets
// embedded, uPlot vendored, no CDN) and the JSON API behind it
// (docs/console.md). It shows the lag.Sampler's figures (the same /metrics
// exports): the deliverable lag now, per consumer and index the deliverable
// lag and backlog, what is blocked by cause (failed, backing_off, paused),
// failures, blocked aggregates, drift warnings and partitions per instance;
// per alias, its drift and the progress of its reindex (the Reindex panel);
// per backfill source, its newest job, with start, abort and dry run (the
// Backfills panel: the backfills run in this process);
// charts of the history that History keeps in PostgreSQL
// (aa_console_sample, written by one relay at a time); event pages; and,
// when an operator token is configured, retry, ack and skip of one event, one
// aggregate or a filter through outboxadmin.Admin, the CLI's code.
package dashboard

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/searchsync/searchsync/lag"
)

//go:embed assets
var assets embed.FS

// Partition is the share of one relay instance.
type Partition struct {
	Owner      string    `json:"owner"`
	Partitions []int     `json:"partitions"`
	Heartbeat  time.Time `json:"heartbeat"`
}

// Source is what the page shows. Only Sampler is required.
type Source struct {
	Sampler *lag.Sampler
	// Instance names this relay.
	Instance string
	// Drift returns warnings of index definitions that differ from the live
	// indexes ("reindex required").
	Drift func() []string
	// Partitions returns the partition owners.
	Partitions func(ctx context.Context) ([]Partition, error)
	// Engine is how the relay reaches the search engine (nil: no search
	// consumer). It names the auth method, never a secret.
	Engine *Engine
	// History serves /api/history (nil: the endpoint answers 503).
	History *History
	// Events serves the event pages and the actions (nil: they answer 503).
	Events *Events
	Logger *slog.Logger

	// Reindex serves /api/reindex, the Reindex panel (nil: it answers 503).
	Reindex *Reindex
	// PublicURL is the console's address behind a proxy (http.public_url):
	// actions from a page there are the console's own (nil: none).
	PublicURL *url.URL
	// Backfill serves /api/backfill, the Backfills panel, and runs the
	// backfills it starts (nil: it answers 503).
	Backfill *Backfills
}

// Engine describes the search engine connection: where, the auth method
// (never its secret) and how the certificate is verified.
type Engine struct {
	Kind      string   `json:"kind"`
	Addresses []string `json:"addresses"`
	Auth      string   `json:"auth"`
	TLS       string   `json:"tls"`
	// InsecureSkipVerify is engine.tls.insecure_skip_verify; Warning says
	// what it means.
	InsecureSkipVerify bool   `json:"insecure_skip_verify"`
	Warning            string `json:"warning,omitempty"`
}

// State is the JSON document behind the page.
type State struct {
	Instance   string        `json:"instance"`
	Snapshot   *lag.Snapshot `json:"snapshot"`
	Drift      []string      `json:"drift"`
	Partitions []Partition   `json:"partitions"`
	Engine     *Engine       `json:"engine,omitempty"`
	// Actions is true when retry, ack and skip are enabled
	// (http.operator_token).
	Actions bool `json:"actions"`
	// Health is the page's verdict: the snapshot's (lag.Snapshot.Health),
	// down while the relay cannot read the outbox, degraded by an index
	// that is not healthy.
	Health lag.Health `json:"health"`
	// Unreachable says since when and why the relay cannot read the
	// outbox (absent while it can); the snapshot is from before.
	Unreachable *Unreachable `json:"unreachable,omitempty"`
	// Indexes are the search consumers' aliases with their document
	// count and health (the drift watcher's last check).
	Indexes []AliasDrift `json:"indexes"`
}

// Unreachable is a database the relay cannot read.
type Unreachable struct {
	Since time.Time `json:"since"`
	Error string    `json:"error"`
}

// health is the page's verdict from the snapshot, the sampler's failure
// and the indexes.
func (st *State) health() lag.Health {
	if st.Unreachable != nil {
		return lag.Health{State: lag.HealthDown, Reasons: []string{"the relay cannot read the outbox since " +
			st.Unreachable.Since.Format(time.TimeOnly) + " (the database is unreachable?): " + st.Unreachable.Error}}
	}
	if st.Snapshot == nil {
		return lag.Health{State: "unknown", Reasons: []string{"waiting for the first sample"}}
	}
	h := st.Snapshot.Health
	h.Reasons = append([]string{}, h.Reasons...)
	for _, ix := range st.Indexes {
		if ix.Health == lag.HealthFailing || ix.Health == lag.HealthDegraded {
			h.Reasons = append(h.Reasons, "index "+ix.Alias+": "+ix.HealthReason)
			if h.State == lag.HealthHealthy {
				h.State = lag.HealthDegraded
			}
		}
	}
	return h
}

// Handler serves the page at / and its data at /api/state.
func Handler(src Source) http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /", http.FileServerFS(static))
	mux.HandleFunc("GET /api/state", func(w http.ResponseWriter, r *http.Request) {
		st := State{Instance: src.Instance, Snapshot: src.Sampler.Last(), Drift: []string{}, Engine: src.Engine,
			Actions: src.Events != nil && !src.Events.Token.IsZero()}
		if src.Drift != nil {
			st.Drift = append(st.Drift, src.Drift()...)
		}
		if src.Partitions != nil {
			p, err := src.Partitions(r.Context())
			if err != nil && src.Logger != nil {
				src.Logger.Debug("dashboard: partitions", "err", err)
			}
			st.Partitions = p
		}
		if since, err := src.Sampler.Failing(); err != nil {
			st.Unreachable = &Unreachable{Since: since, Error: lag.Redact(err.Error(), 300)}
		}
		st.Indexes = []AliasDrift{}
		if src.Reindex != nil && src.Reindex.Aliases != nil {
			st.Indexes = append(st.Indexes, src.Reindex.Aliases()...)
		}
		st.Health = st.health()
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("GET /api/history", func(w http.ResponseWriter, r *http.Request) { serveHistory(w, r, src) })
	src.registerEvents(mux)
	src.registerReindex(mux)
	src.registerBackfill(mux)
	mux.HandleFunc("GET /events/{id}", func(w http.ResponseWriter, r *http.Request) {
		// The event's own page (it reads /api/events/{id}).
		http.ServeFileFS(w, r, static, "event.html")
	})
	// Every other /api path answers in JSON too (one pattern per method:
	// a method-less one would clash with "GET /").
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		mux.HandleFunc(m+" /api/", func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no API at %s %s (docs/console.md lists them)", r.Method, r.URL.Path))
		})
	}
	return mux
}

// Ranges are the spans /api/history serves.
var Ranges = map[string]time.Duration{"1h": time.Hour, "6h": 6 * time.Hour, "24h": 24 * time.Hour}

// HistoryResponse is the JSON of /api/history.
type HistoryResponse struct {
	Range string `json:"range"`
	// StepSeconds is the time between two samples of the answer (samples
	// are thinned to at most 720 per range); IntervalSeconds the time
	// between two written samples.
	StepSeconds     float64  `json:"step_seconds"`
	IntervalSeconds float64  `json:"interval_seconds"`
	Samples         []Sample `json:"samples"`
}

func serveHistory(w http.ResponseWriter, r *http.Request, src Source) {
	if src.History == nil {
		writeError(w, http.StatusServiceUnavailable, "history is not kept by this process")
		return
	}
	rng := cmp.Or(r.URL.Query().Get("range"), "1h")
	span, ok := Ranges[rng]
	if !ok {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("range %q: want 1h, 6h or 24h", rng))
		return
	}
	var since time.Time
	if s := r.URL.Query().Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("since %q: want an RFC 3339 time", s))
			return
		}
		since = t
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	samples, step, err := src.History.Read(ctx, span, since)
	if err != nil {
		if src.Logger != nil {
			src.Logger.Warn("dashboard: history", "err", err)
		}
		writeError(w, http.StatusInternalServerError, "reading the history failed; see the relay's log")
		return
	}
	if samples == nil {
		samples = []Sample{}
	}
	writeJSON(w, http.StatusOK, HistoryResponse{Range: rng, StepSeconds: step.Seconds(),
		IntervalSeconds: src.History.Interval().Seconds(), Samples: samples})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // a failed write means the client went away: nothing to tell it
}

// Error is the JSON of every refused or failed /api request.
type Error struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, Error{Error: msg})
}
