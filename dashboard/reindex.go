package dashboard

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/searchsync/searchsync/lag"
)

// Drift states of an alias (AliasDrift.Drift).
const (
	DriftNone    = "none"    // the live index matches the definition
	DriftDiffers = "differs" // it does not: a reindex is required
	DriftUnknown = "unknown" // not checked yet, not checkable (per_tenant), or the check failed
)

// AliasDrift is what the drift watcher last found for one alias of a search
// consumer.
type AliasDrift struct {
	Alias string `json:"alias"`
	// Index is the live physical index the alias points to ("" when the
	// alias is missing).
	Index string `json:"index"`
	// Hash is the hash of the definition on disk; LiveHash the one in the
	// live index's _meta.
	Hash     string `json:"hash"`
	LiveHash string `json:"live_hash"`
	// ProjectionsHash is the fingerprint of the projections that write the
	// alias (as loaded now), LiveProjectionsHash the one in the live
	// index's _meta; ProjectionChanges describe how they differ
	// ("projection customer changed: fields added full_name").
	ProjectionsHash     string   `json:"projections_hash,omitempty"`
	LiveProjectionsHash string   `json:"live_projections_hash,omitempty"`
	ProjectionChanges   []string `json:"projection_changes,omitempty"`
	// Drift is DriftNone, DriftDiffers or DriftUnknown.
	Drift string `json:"drift"`
	// Message is the watcher's text: the drift's reason ("reindex
	// required: ..."), or why the alias was not checked.
	Message   string    `json:"message,omitempty"`
	CheckedAt time.Time `json:"checked_at"`
	// Docs is the alias's document count and EngineHealth the engine's
	// health of it (green, yellow, red), as the last check read them
	// (absent when not read; StatsError says why).
	Docs         *int64 `json:"docs,omitempty"`
	EngineHealth string `json:"engine_health,omitempty"`
	StatsError   string `json:"stats_error,omitempty"`
	// SearchableOff says why commit → searchable is not measured for the
	// alias (the engine refuses its refresh stats), "" when it is.
	SearchableOff string `json:"searchable_off,omitempty"`
	// Health is healthy, degraded (replicas unassigned, or the definition
	// differs), failing (primary shards unassigned, or the alias missing)
	// or unknown (not read); HealthReason says why when it is not healthy.
	Health       string `json:"health"`
	HealthReason string `json:"health_reason,omitempty"`
}

// Judge sets the alias's Health from what the check found.
func (a *AliasDrift) Judge() {
	switch {
	case a.EngineHealth == "red":
		a.Health, a.HealthReason = lag.HealthFailing, "the engine reports it red: primary shards are unassigned, writes to them fail"
	case a.Drift == DriftNone && a.Index == "":
		a.Health, a.HealthReason = lag.HealthFailing, cmp.Or(a.Message, "the alias is missing")
	case a.Drift == DriftDiffers:
		a.Health, a.HealthReason = lag.HealthDegraded, a.Message
	case a.EngineHealth == "yellow":
		a.Health, a.HealthReason = lag.HealthDegraded, "the engine reports it yellow: replica shards are unassigned (no copy if a node fails)"
	case a.EngineHealth == "green" && a.Drift == DriftNone:
		a.Health, a.HealthReason = lag.HealthHealthy, ""
	default:
		a.Health, a.HealthReason = "unknown", cmp.Or(a.StatsError, a.Message, "not checked yet")
	}
}

// ReindexJob is one reindex job (aa_job) as the Reindex panel shows it.
type ReindexJob struct {
	ID    int64  `json:"id"`
	Alias string `json:"alias"`
	// State is running, succeeded, failed or aborted; Phase the job's
	// phase (create, seed, replay, verify, swap, done, aborted).
	State string `json:"state"`
	Phase string `json:"phase"`
	// Source is the live index the job copies from, Target the new one.
	Source string `json:"source"`
	Target string `json:"target"`
	// DocsSeeded of DocsTotal documents copied from the live index
	// (DocsTotal 0 until the engine told).
	DocsSeeded int64 `json:"docs_seeded"`
	DocsTotal  int64 `json:"docs_total"`
	// LastID is the last outbox id replayed, Watermark the end of the
	// current replay pass, OutboxHead the outbox's highest id now.
	LastID         int64 `json:"last_id"`
	Watermark      int64 `json:"watermark"`
	OutboxHead     int64 `json:"outbox_head"`
	EventsReplayed int64 `json:"events_replayed"`
	DocsWritten    int64 `json:"docs_written"`
	// Percent is how far the current phase is: the seed's documents, the
	// replay's position in its pass (absent in the other phases).
	Percent *float64 `json:"percent,omitempty"`
	// Rate is documents per second of the current phase; ETA its
	// remaining time as the job estimates it.
	Rate float64 `json:"rate_per_s"`
	ETA  string  `json:"eta,omitempty"`
	// Waiting is why writes pause (the engine cannot take them).
	Waiting string `json:"waiting,omitempty"`
	// Owed is, in the verify phase, how many events the replay wrote that
	// the live consumers have not delivered yet (the check waits for them).
	Owed       int64      `json:"owed,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// HeartbeatAgeSeconds is the age of the owner's last heartbeat.
	HeartbeatAgeSeconds float64 `json:"heartbeat_age_seconds"`
	// Owner is the process that runs (or ran) the job: host:pid:id.
	Owner string `json:"owner"`
	// Seconds is the whole run's time, of a finished job; NewIndex the
	// index the alias points to after it.
	Seconds  float64 `json:"seconds,omitempty"`
	NewIndex string  `json:"new_index,omitempty"`
	Error    string  `json:"error,omitempty"`
}

// SetPercent fills Percent from the phase's figures.
func (j *ReindexJob) SetPercent() {
	var done, of int64
	switch j.Phase {
	case "seed":
		done, of = j.DocsSeeded, j.DocsTotal
	case "replay":
		done, of = j.LastID, j.Watermark
		if of == 0 {
			of = j.OutboxHead
		}
	}
	if of <= 0 {
		j.Percent = nil
		return
	}
	p := min(100, 100*float64(done)/float64(of))
	j.Percent = &p
}

// Reindex feeds /api/reindex; cmd/searchsync wires it to the drift watcher
// and reindex.List, so that this package needs neither.
type Reindex struct {
	// Aliases returns every alias of the search consumers with what the
	// drift watcher last found (no I/O).
	Aliases func() []AliasDrift
	// Jobs returns the running reindex jobs and those that ended at or
	// after since, at most one (the newest) per alias, in one statement.
	Jobs func(ctx context.Context, since time.Time) ([]ReindexJob, error)
	// Recent is how long a finished job stays on the panel. Default 24h.
	Recent time.Duration
}

// ReindexAlias is one row of the Reindex panel: an alias, its drift and its
// running or latest recent job (nil when none).
type ReindexAlias struct {
	AliasDrift
	Job *ReindexJob `json:"job"`
}

// ReindexResponse is the JSON of /api/reindex.
type ReindexResponse struct {
	Aliases []ReindexAlias `json:"aliases"`
	// Since is the oldest end of a finished job listed.
	Since time.Time `json:"since"`
}

func (src Source) registerReindex(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/reindex", func(w http.ResponseWriter, r *http.Request) { serveReindex(w, r, src.Reindex, src.Logger) })
}

func serveReindex(w http.ResponseWriter, r *http.Request, src *Reindex, log *slog.Logger) {
	if src == nil {
		writeError(w, http.StatusServiceUnavailable, "reindex jobs are not read by this process")
		return
	}
	recent := src.Recent
	if recent <= 0 {
		recent = 24 * time.Hour
	}
	since := time.Now().Add(-recent)
	var jobs []ReindexJob
	if src.Jobs != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		var err error
		if jobs, err = src.Jobs(ctx, since); err != nil {
			if log != nil {
				log.Warn("dashboard: reindex jobs", "err", err)
			}
			writeError(w, http.StatusInternalServerError, "reading the reindex jobs failed; see the relay's log")
			return
		}
	}
	var aliases []AliasDrift
	if src.Aliases != nil {
		aliases = src.Aliases()
	}
	writeJSON(w, http.StatusOK, ReindexResponse{Aliases: reindexRows(aliases, jobs), Since: since})
}

// reindexRows joins the aliases with their jobs: one row per configured
// alias in its order, then one per other alias a job names (a tenant's
// alias of a per_tenant definition, an alias no longer configured).
func reindexRows(aliases []AliasDrift, jobs []ReindexJob) []ReindexAlias {
	byAlias := map[string]*ReindexJob{}
	for i := range jobs {
		j := &jobs[i]
		j.SetPercent()
		if cur := byAlias[j.Alias]; cur == nil || j.ID > cur.ID {
			byAlias[j.Alias] = j
		}
	}
	out := make([]ReindexAlias, 0, len(aliases)+len(jobs))
	seen := map[string]bool{}
	for _, a := range aliases {
		out = append(out, ReindexAlias{AliasDrift: a, Job: byAlias[a.Alias]})
		seen[a.Alias] = true
	}
	for i := range jobs {
		j := &jobs[i]
		if seen[j.Alias] || byAlias[j.Alias] != j {
			continue
		}
		seen[j.Alias] = true
		out = append(out, ReindexAlias{AliasDrift: AliasDrift{Alias: j.Alias, Drift: DriftUnknown,
			Message: "not an alias of a search consumer's indexes (a tenant's alias, or no longer configured)"}, Job: j})
	}
	return out
}
