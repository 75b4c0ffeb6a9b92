package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/backfill"
)

// BackfillJob is one backfill job (aa_job) as the Backfills panel shows it.
type BackfillJob struct {
	ID     int64  `json:"id"`
	Source string `json:"source"`
	// State is running, interrupted (stopped or killed mid-way: a start
	// resumes it), succeeded or aborted; Phase the job's (count, read,
	// wait, done, aborted).
	State string `json:"state"`
	Phase string `json:"phase"`
	// Owner is the process that runs it (console:NAME@host:pid:id when a
	// console started it); "" once released.
	Owner string `json:"owner,omitempty"`
	// Here says that this process runs it.
	Here bool `json:"here"`
	// Rows written as events of Total, the rows the source yielded when the
	// job started; Percent is Rows of Total (absent while Total is 0).
	Rows    int64    `json:"rows"`
	Total   int64    `json:"total"`
	Percent *float64 `json:"percent,omitempty"`
	Chunks  int64    `json:"chunks"`
	// Rate is rows per second of the current run, ETA what remains at that
	// rate (running jobs only).
	Rate float64 `json:"rate_per_s"`
	ETA  string  `json:"eta,omitempty"`
	// Waiting is why the backfill pauses (the outbox's backlog above
	// max_backlog, the database away), while it runs.
	Waiting string `json:"waiting,omitempty"`
	// InterruptedBy is what stopped the last run of an interrupted job (""
	// after a shutdown or a kill).
	InterruptedBy string `json:"interrupted_by,omitempty"`
	// Error is why it was aborted.
	Error string `json:"error,omitempty"`
	// CorrelationID is the correlation_id of every event it writes.
	CorrelationID       string     `json:"correlation_id,omitempty"`
	StartedAt           time.Time  `json:"started_at"`
	UpdatedAt           time.Time  `json:"updated_at"`
	FinishedAt          *time.Time `json:"finished_at,omitempty"`
	HeartbeatAgeSeconds float64    `json:"heartbeat_age_seconds"`
	// Seconds is the time of the run that finished it; Resumed says that
	// run took over an interrupted job.
	Seconds float64 `json:"seconds,omitempty"`
	Resumed bool    `json:"resumed,omitempty"`
}

// PanelBackfillJob is a job as the panel (and `searchsync status`) shows it.
func PanelBackfillJob(j backfill.JobInfo) BackfillJob {
	p := j.Progress
	bj := BackfillJob{ID: j.ID, Source: j.Source, State: j.State, Phase: p.Phase, Owner: j.Owner, Rows: p.Rows, Total: p.Total, Chunks: p.Chunks,
		Rate: p.Rate, ETA: p.ETA, Waiting: p.Waiting, Error: j.Error, StartedAt: j.StartedAt, UpdatedAt: p.UpdatedAt,
		FinishedAt: j.FinishedAt, HeartbeatAgeSeconds: j.HeartbeatAge.Seconds()}
	if j.Params.Correlation != uuid.Nil {
		bj.CorrelationID = j.Params.Correlation.String()
	}
	if j.State != backfill.StateRunning {
		bj.Rate, bj.ETA, bj.Waiting = 0, "", ""
	}
	if j.State == backfill.StateInterrupted {
		bj.InterruptedBy = p.Error
	}
	if j.Result != nil {
		bj.Seconds, bj.Resumed = j.Result.Seconds, j.Result.Resumed
	}
	if bj.Total > 0 {
		pct := min(100, 100*float64(bj.Rows)/float64(bj.Total))
		bj.Percent = &pct
	}
	return bj
}

// BackfillRow is one row of the Backfills panel: a source and its newest
// job (nil when it has none).
type BackfillRow struct {
	Source backfill.Source `json:"source"`
	// Declared is false for a source with a job that the configuration no
	// longer declares (it cannot be started from here).
	Declared bool         `json:"declared"`
	Job      *BackfillJob `json:"job"`
}

// BackfillResponse is the JSON of GET /api/backfill.
type BackfillResponse struct {
	Sources []BackfillRow `json:"sources"`
	// Actions says that start, abort and dry run are enabled
	// (http.operator_token).
	Actions bool `json:"actions"`
}

// BackfillStartAnswer is the JSON of POST /api/backfill/{source}/start.
type BackfillStartAnswer struct {
	Source  string       `json:"source"`
	Message string       `json:"message"`
	Job     *BackfillJob `json:"job"`
}

// BackfillAbortAnswer is the JSON of POST /api/backfill/{source}/abort.
type BackfillAbortAnswer struct {
	Source  string `json:"source"`
	JobID   int64  `json:"job_id"`
	Message string `json:"message"`
}

// BackfillPlan is the JSON of POST /api/backfill/{source}/dry-run: what a
// backfill would write now; nothing is written.
type BackfillPlan struct {
	Source backfill.Source `json:"source"`
	// Rows is how many rows the source yields now (one event each).
	Rows   int64            `json:"rows"`
	Sample []BackfillSample `json:"sample"`
	// Resume is the interrupted (or running) job a start would resume.
	Resume *BackfillJob `json:"resume,omitempty"`
}

// BackfillSample is one sample row's event as a backfill would write it.
type BackfillSample struct {
	Key           string          `json:"key"`
	EventType     string          `json:"event_type"`
	AggregateType string          `json:"aggregate_type"`
	AggregateID   *uuid.UUID      `json:"aggregate_id"`
	TenantID      *uuid.UUID      `json:"tenant_id,omitempty"`
	SchemaVersion int             `json:"schema_version"`
	Payload       json.RawMessage `json:"payload"`
	// Consumers are those the event would be routed to ([]: none, it
	// would be skipped).
	Consumers []string `json:"consumers"`
}

// backfillBody is the optional body of the POST requests.
type backfillBody struct {
	// Note is logged with a start and recorded in an abort's reason.
	Note string `json:"note"`
	// Sample is how many events a dry run shows (1–20, default 3).
	Sample int `json:"sample"`
}

// startWait is how long a start waits for the backfill to take its job.
const startWait = 5 * time.Second

func (src Source) registerBackfill(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/backfill", src.listBackfills)
	mux.HandleFunc("POST /api/backfill/{source}/start", func(w http.ResponseWriter, r *http.Request) { src.backfillAction(w, r, "start") })
	mux.HandleFunc("POST /api/backfill/{source}/abort", func(w http.ResponseWriter, r *http.Request) { src.backfillAction(w, r, "abort") })
	mux.HandleFunc("POST /api/backfill/{source}/dry-run", func(w http.ResponseWriter, r *http.Request) { src.backfillAction(w, r, "dry-run") })
}

func (src Source) listBackfills(w http.ResponseWriter, r *http.Request) {
	b := src.Backfill
	if b == nil {
		writeError(w, http.StatusServiceUnavailable, "backfills are not run by this process")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	jobs, err := LatestBackfills(ctx, b.Pool, b.names(), b.staleAfter())
	if err != nil {
		if src.Logger != nil {
			src.Logger.Warn("dashboard: backfill jobs", "err", err)
		}
		writeError(w, http.StatusInternalServerError, "reading the backfill jobs failed; see the relay's log")
		return
	}
	byName := map[string]backfill.JobInfo{}
	for _, j := range jobs {
		byName[j.Source] = j
	}
	ans := BackfillResponse{Sources: []BackfillRow{}, Actions: src.Events != nil && !src.Events.Token.IsZero()}
	row := func(s backfill.Source, declared bool) {
		br := BackfillRow{Source: s, Declared: declared}
		if j, ok := byName[s.Name]; ok {
			pj := PanelBackfillJob(j)
			pj.Here = j.State == backfill.StateRunning && b.Here(s.Name)
			br.Job = &pj
		}
		ans.Sources = append(ans.Sources, br)
	}
	for _, s := range b.Sources {
		row(s.WithDefaults(), true)
	}
	for _, j := range jobs {
		if _, ok := b.source(j.Source); !ok {
			row(j.Params.Source, false)
		}
	}
	writeJSON(w, http.StatusOK, ans)
}

// backfillAction serves the POSTs: start, abort and dry-run of a declared
// source, with the operator token (as every action).
func (src Source) backfillAction(w http.ResponseWriter, r *http.Request, action string) {
	by, ok := src.operator(w, r)
	if !ok {
		return
	}
	b := src.Backfill
	if b == nil {
		writeError(w, http.StatusServiceUnavailable, "backfills are not run by this process")
		return
	}
	name := r.PathValue("source")
	s, ok := b.source(name)
	if !ok {
		writeError(w, http.StatusNotFound, unknownSource(name, b.names()))
		return
	}
	var body backfillBody
	if !decodeBody(w, r, &body, true) {
		return
	}
	switch action {
	case "start":
		src.startBackfill(w, r, s, by, body)
	case "abort":
		src.abortBackfill(w, r, s, by, body)
	default:
		src.dryRunBackfill(w, r, s, by, body)
	}
}

func unknownSource(name string, declared []string) string {
	if len(declared) == 0 {
		return fmt.Sprintf("no backfill source %q: the configuration declares none (backfill.sources, docs/backfill.md)", name)
	}
	return fmt.Sprintf("no backfill source %q; declared: %s", name, strings.Join(declared, ", "))
}

func (src Source) logAction(action, source, by string, args ...any) {
	if src.Logger != nil {
		src.Logger.Info("console: operator action", append([]any{"action", action, "source", source, "by", by}, args...)...)
	}
}

func (src Source) startBackfill(w http.ResponseWriter, r *http.Request, s backfill.Source, by string, body backfillBody) {
	b := src.Backfill
	st, err := b.Start(s, by, startWait)
	var running *backfill.RunningError
	switch {
	case errors.Is(err, ErrBackfillsStopped):
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	case errors.Is(err, ErrRunningHere):
		writeError(w, http.StatusConflict, fmt.Sprintf("a backfill of %s already runs in this process; abort it first to start anew", s.Name))
		return
	case errors.As(err, &running):
		writeError(w, http.StatusConflict, err.Error())
		return
	case err != nil:
		src.fail(w, "backfill of "+s.Name, err)
		return
	}
	msg := describeStart(s.Name, st.Progress)
	src.logAction("backfill start", s.Name, by, "note", body.Note, "message", msg)
	ans := BackfillStartAnswer{Source: s.Name, Message: msg}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if jobs, err := backfill.List(ctx, b.Pool, s.Name, 1, b.staleAfter()); err == nil && len(jobs) == 1 {
		pj := PanelBackfillJob(jobs[0])
		pj.Here = jobs[0].State == backfill.StateRunning && b.Here(s.Name)
		ans.Job = &pj
	}
	writeJSON(w, http.StatusAccepted, ans)
}

func (src Source) abortBackfill(w http.ResponseWriter, r *http.Request, s backfill.Source, by string, body backfillBody) {
	reason := "aborted in the console by " + by
	if n := strings.TrimSpace(body.Note); n != "" {
		reason += ": " + n
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	id, err := backfill.Abort(ctx, src.Backfill.Pool, s.Name, reason)
	if errors.Is(err, backfill.ErrNoJob) {
		writeError(w, http.StatusConflict, fmt.Sprintf("no backfill of %s is running or interrupted: nothing to abort", s.Name))
		return
	}
	if err != nil {
		src.fail(w, "abort of the backfill of "+s.Name, err)
		return
	}
	src.logAction("backfill abort", s.Name, by, "job_id", id, "note", body.Note)
	writeJSON(w, http.StatusOK, BackfillAbortAnswer{Source: s.Name, JobID: id,
		Message: fmt.Sprintf("aborted backfill job %d of %s; the events it wrote stay in the outbox", id, s.Name)})
}

func (src Source) dryRunBackfill(w http.ResponseWriter, r *http.Request, s backfill.Source, by string, body backfillBody) {
	n := body.Sample
	if n == 0 {
		n = 3
	}
	if n < 1 || n > 20 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("sample %d: want 1 to 20", body.Sample))
		return
	}
	b := src.Backfill
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	plan, err := backfill.DryRun(ctx, b.Pool, s, n, b.staleAfter())
	var rowErr *backfill.RowError
	if errors.As(err, &rowErr) {
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	if err != nil {
		src.fail(w, "dry run of the backfill of "+s.Name, err)
		return
	}
	src.logAction("backfill dry run", s.Name, by, "rows", plan.Rows)
	ans := BackfillPlan{Source: plan.Source, Rows: plan.Rows, Sample: []BackfillSample{}}
	for _, row := range plan.Sample {
		e := row.Event
		smp := BackfillSample{Key: row.Key, EventType: e.EventType, AggregateType: e.AggregateType, AggregateID: e.AggregateID,
			TenantID: e.TenantID, SchemaVersion: e.SchemaVersion, Payload: e.Payload, Consumers: []string{}}
		if b.Route != nil {
			smp.Consumers = append(smp.Consumers, b.Route(e.EventType, e.AggregateType)...)
		}
		ans.Sample = append(ans.Sample, smp)
	}
	if plan.Resume != nil {
		pj := PanelBackfillJob(*plan.Resume)
		ans.Resume = &pj
	}
	writeJSON(w, http.StatusOK, ans)
}
