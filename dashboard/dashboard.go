// Package dashboard serves the relay's live dashboard: one page (assets
// embedded, no CDN) that polls /api/state and shows the deliverable lag now
// (the headline "Lag now": the oldest event a running consumer could be given)
// and over the last hour per consumer, throughput, backlog, per consumer and
// index the deliverable lag and backlog, a separate panel of what is blocked
// (by cause: failed, backing_off, paused), failed or paused with since and why,
// failures with their last errors, blocked aggregates, drift warnings and
// partitions per instance. The figures are the lag.Sampler's, the same the
// /metrics gauges export.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
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
	Logger *slog.Logger
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
	History    []lag.Point   `json:"history"`
	Drift      []string      `json:"drift"`
	Partitions []Partition   `json:"partitions"`
	Engine     *Engine       `json:"engine,omitempty"`
}

// Handler serves the page at / and its data at /api/state.
func Handler(src Source) http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /", http.FileServerFS(static))
	mux.HandleFunc("GET /api/state", func(w http.ResponseWriter, r *http.Request) {
		st := State{Instance: src.Instance, Snapshot: src.Sampler.Last(), History: src.Sampler.History(), Drift: []string{}, Engine: src.Engine}
		if src.Drift != nil {
			st.Drift = append(st.Drift, src.Drift()...)
		}
		if src.Partitions != nil {
			p, err := src.Partitions(r.Context())
			if err != nil && src.Logger != nil {
				src.Logger.Warn("dashboard: partitions", "err", err)
			}
			st.Partitions = p
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(st) // a failed write means the client went away: nothing to tell it
	})
	return mux
}
