package dashboard

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/internal/secret"
	"github.com/searchsync/searchsync/lag"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
	"github.com/searchsync/searchsync/projections/dryrun"
)

// Operator actions (docs/console.md, "Actions"): the token travels in
// TokenHeader, the operator's name in OperatorHeader.
const (
	TokenHeader    = "X-Searchsync-Token"
	OperatorHeader = "X-Searchsync-Operator"
)

// Events is what the event pages and the actions need: the outbox's operator
// code (the CLI's: `searchsync outbox list|retry|ack|skip`) and a pool.
type Events struct {
	Admin *outboxadmin.Admin
	DB    outboxadmin.DB
	// Token enables the actions; zero: the console is read-only.
	Token secret.Value
	// DryRun says what the search consumers would write for an event (the
	// CLI's `searchsync projections test`); nil: the event page shows
	// nothing of it.
	DryRun *dryrun.Runner
}

// EventsPage is the JSON of GET /api/events.
type EventsPage struct {
	Events []outboxadmin.Listed `json:"events"`
	// NextAfterID is the after_id of the next page, 0 on the last one.
	NextAfterID int64 `json:"next_after_id"`
}

// EventDetail is the JSON of GET /api/events/{id}.
type EventDetail struct {
	Event *outboxadmin.Listed `json:"event"`
	// Waiting are the pending events of its aggregate after it (at most 20).
	Waiting []outboxadmin.Listed `json:"waiting"`
	// Consumers is every routed consumer's state of it: its delivery row,
	// or the outbox row's state shared by all (outboxadmin.Admin.Deliveries).
	Consumers []outboxadmin.Delivery `json:"consumers"`
	// Projection is what the search consumers would write for the event
	// now (Events.DryRun): the upcast payload, the document or the poison
	// error with its path. Absent when the process has no dry run.
	Projection *dryrun.Report `json:"projection,omitempty"`
}

// BlockedPage is the JSON of GET /api/blocked.
type BlockedPage struct {
	Blocked []lag.Blocked `json:"blocked"`
	// Total counts the blocked aggregates; Listed how many the relay's
	// sample lists (the oldest heads), which paging covers.
	Total      int64 `json:"total"`
	Listed     int   `json:"listed"`
	NextOffset int   `json:"next_offset"`
}

const (
	defaultPage = 50
	maxPage     = 200
)

func (src Source) registerEvents(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/events", src.listEvents)
	mux.HandleFunc("GET /api/events/{id}", src.getEvent)
	mux.HandleFunc("GET /api/blocked", src.listBlocked)
	mux.HandleFunc("GET /api/error-classes", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, ErrorClasses) })
	mux.HandleFunc("POST /api/events/{id}/retry", func(w http.ResponseWriter, r *http.Request) { src.act(w, r, "retry") })
	mux.HandleFunc("POST /api/events/{id}/ack", func(w http.ResponseWriter, r *http.Request) { src.act(w, r, "ack") })
	mux.HandleFunc("POST /api/events/{id}/skip", func(w http.ResponseWriter, r *http.Request) { src.act(w, r, "skip") })
	mux.HandleFunc("POST /api/actions", src.actions)
}

// queryInt reads a non-negative integer parameter (def when absent).
func queryInt(q url.Values, key string, def int) (int, error) {
	s := q.Get(key)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s %q: want a non-negative integer", key, s)
	}
	return n, nil
}

// queryLimit reads the page size parameter limit: 1 to maxPage, defaultPage
// when absent.
func queryLimit(q url.Values) (int, error) {
	limit, err := queryInt(q, "limit", defaultPage)
	if err == nil && (limit < 1 || limit > maxPage) {
		err = fmt.Errorf("limit %d: want 1 to %d", limit, maxPage)
	}
	return limit, err
}

func (src Source) listEvents(w http.ResponseWriter, r *http.Request) {
	if src.Events == nil {
		writeError(w, http.StatusServiceUnavailable, "event pages are not served by this process")
		return
	}
	q := r.URL.Query()
	limit, err := queryLimit(q)
	after := 0
	if err == nil {
		after, err = queryInt(q, "after_id", 0)
	}
	f := outboxadmin.Filter{Consumer: q.Get("consumer"), EventType: q.Get("event_type"), AggregateType: q.Get("aggregate_type"),
		Index: q.Get("index"), Error: q.Get("error"), AfterID: int64(after), Limit: limit + 1}
	if err == nil {
		err = checkError("error", f.Error)
	}
	if err == nil {
		st := outbox.Status(q.Get("status"))
		switch st {
		case "":
			f.Statuses = []outbox.Status{outbox.StatusFailed}
		case "any":
		case outbox.StatusFailed, outbox.StatusPending, outbox.StatusDispatched, outbox.StatusSkipped:
			f.Statuses = []outbox.Status{st}
		default:
			err = fmt.Errorf("status %q: want failed, pending, dispatched, skipped or any", st)
		}
	}
	if a := q.Get("aggregate_id"); err == nil && a != "" {
		id, perr := uuid.Parse(a)
		if perr != nil {
			err = fmt.Errorf("aggregate_id %q: want a UUID", a)
		}
		f.AggregateID = &id
	}
	if err == nil && f.Consumer != "" {
		err = src.Events.Admin.CheckConsumer(f.Consumer)
	}
	if err == nil {
		_, err = src.Events.Admin.ResolveIndex(f)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	evs, err := src.Events.Admin.List(ctx, src.Events.DB, f)
	if err != nil {
		src.fail(w, "list events", err)
		return
	}
	page := EventsPage{Events: evs}
	if len(evs) > limit {
		page.Events = evs[:limit]
		page.NextAfterID = evs[limit-1].ID
	}
	for i := range page.Events {
		page.Events[i].Payload = nil // one event's page shows it
	}
	if page.Events == nil {
		page.Events = []outboxadmin.Listed{}
	}
	writeJSON(w, http.StatusOK, page)
}

func (src Source) getEvent(w http.ResponseWriter, r *http.Request) {
	if src.Events == nil {
		writeError(w, http.StatusServiceUnavailable, "event pages are not served by this process")
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("event id %q: want a positive integer", r.PathValue("id")))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	evs, err := src.Events.Admin.List(ctx, src.Events.DB, outboxadmin.Filter{IDs: []int64{id}, Limit: 1})
	if err != nil {
		src.fail(w, "read an event", err)
		return
	}
	if len(evs) == 0 {
		writeError(w, http.StatusNotFound, fmt.Sprintf("event %d is not in the outbox (delivered and compacted, acknowledged, or never written)", id))
		return
	}
	d := EventDetail{Event: &evs[0], Waiting: []outboxadmin.Listed{}, Consumers: src.Events.Admin.Deliveries(evs[0])}
	if src.Events.DryRun != nil {
		ev := evs[0].Event // the dry run reads a copy
		d.Projection = src.Events.DryRun.Run(ctx, &ev)
	}
	if e := evs[0]; e.AggregateID != nil {
		waiting, err := src.Events.Admin.List(ctx, src.Events.DB, outboxadmin.Filter{AggregateType: globEscape(e.AggregateType), AggregateID: e.AggregateID,
			Statuses: []outbox.Status{outbox.StatusPending}, AfterID: e.ID, Limit: 20})
		if err != nil {
			src.fail(w, "read an aggregate's events", err)
			return
		}
		for i := range waiting {
			waiting[i].Payload = nil
		}
		d.Waiting = append(d.Waiting, waiting...)
	}
	writeJSON(w, http.StatusOK, d)
}

// globEscape makes a literal aggregate type a Filter pattern that matches
// only itself (* and ? are wildcards there).
func globEscape(s string) string {
	if strings.ContainsAny(s, "*?") {
		return "" // cannot be escaped; the aggregate id alone selects it
	}
	return s
}

func (src Source) listBlocked(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := queryLimit(q)
	offset := 0
	if err == nil {
		offset, err = queryInt(q, "offset", 0)
	}
	f := outboxadmin.Filter{Consumer: q.Get("consumer"), Index: q.Get("index"), Error: q.Get("error")}
	if err == nil {
		err = checkError("error", f.Error)
	}
	if err == nil && f.Index != "" {
		if src.Events == nil {
			err = errors.New("index: this process serves no event pages, so it knows no indexes")
		} else {
			f, err = src.Events.Admin.ResolveIndex(f)
		}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	page := BlockedPage{Blocked: []lag.Blocked{}}
	snap := src.Sampler.Last()
	if snap != nil {
		consumer, etype := f.Consumer, q.Get("event_type")
		var all []lag.Blocked
		for _, b := range snap.Blocked {
			if consumer != "" && !slices.Contains(b.Consumers, consumer) {
				continue
			}
			if ok, _ := path.Match(etype, b.EventType); etype != "" && !ok {
				continue
			}
			if f.Kinds != nil && !slices.ContainsFunc(f.Kinds, func(k outboxadmin.Kind) bool { return k.Matches(b.EventType, b.AggregateType) }) {
				continue
			}
			if !outboxadmin.MatchError(f.Error, b.LastError) {
				continue
			}
			all = append(all, b)
		}
		page.Total, page.Listed = snap.BlockedCount, len(snap.Blocked)
		if offset < len(all) {
			end := min(len(all), offset+limit)
			page.Blocked = append(page.Blocked, all[offset:end]...)
			if end < len(all) {
				page.NextOffset = end
			}
		}
	}
	writeJSON(w, http.StatusOK, page)
}

// ActionRequest is the optional JSON body of a retry, ack or skip of one
// event.
type ActionRequest struct {
	// Consumer limits the action to one consumer's delivery (as the CLI's
	// --consumer); "" for the event as a whole.
	Consumer string `json:"consumer"`
	// Note is recorded with the action in aa_job.
	Note string `json:"note"`
}

// act runs a retry, ack or skip of one event through the CLI's code path
// (outboxadmin.Admin.Act, recorded in aa_job), after refusing cross-site
// requests and requests without the operator token.
func (src Source) act(w http.ResponseWriter, r *http.Request, action string) {
	by, ok := src.operator(w, r)
	if !ok {
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("event id %q: want a positive integer", r.PathValue("id")))
		return
	}
	var req ActionRequest
	if !decodeBody(w, r, &req, true) {
		return
	}
	if req.Consumer != "" {
		if err := src.Events.Admin.CheckConsumer(req.Consumer); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	ch, ok := src.change(w, r, action, "event "+strconv.FormatInt(id, 10), outboxadmin.Filter{IDs: []int64{id}, Consumer: req.Consumer},
		outboxadmin.ChangeOptions{By: by, Note: req.Note})
	if ok {
		writeJSON(w, http.StatusOK, ch)
	}
}

// operator refuses, and answers, a request for an action when actions are
// off, when it comes from another site or lacks the operator token; else it
// returns who acts (aa_job.owner: console:NAME).
func (src Source) operator(w http.ResponseWriter, r *http.Request) (string, bool) {
	refuse := func(code int, msg string) (string, bool) {
		// Logged with who asked from where, never the token.
		if src.Logger != nil {
			src.Logger.Warn("console: action refused", "reason", msg, "method", r.Method, "path", r.URL.Path,
				"client", r.RemoteAddr, "forwarded_for", r.Header.Get("X-Forwarded-For"), "operator", r.Header.Get(OperatorHeader))
		}
		writeError(w, code, msg)
		return "", false
	}
	if src.Events == nil || src.Events.Token.IsZero() {
		return refuse(http.StatusForbidden, "actions are disabled: configure http.operator_token to enable them")
	}
	if why := src.crossSite(r); why != "" {
		return refuse(http.StatusForbidden, "cross-site request refused: "+why)
	}
	got := r.Header.Get(TokenHeader)
	switch {
	case got == "":
		return refuse(http.StatusUnauthorized, "the operator token (header "+TokenHeader+") is missing")
	case subtle.ConstantTimeCompare([]byte(got), []byte(src.Events.Token.Reveal())) != 1:
		return refuse(http.StatusUnauthorized, "the operator token (header "+TokenHeader+") is wrong")
	}
	who := strings.TrimSpace(r.Header.Get(OperatorHeader))
	if who == "" {
		who = "anonymous"
	}
	if len(who) > 100 {
		who = who[:100]
	}
	return "console:" + who, true
}

// decodeBody reads a JSON body into v, refusing unknown fields; optional
// allows an empty one. It answers the request when it fails.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, optional bool) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && (!optional || !errors.Is(err, io.EOF)) {
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return false
	}
	return true
}

// change runs the action through outboxadmin.Admin.Act and logs it; it answers
// the request when it fails.
func (src Source) change(w http.ResponseWriter, r *http.Request, action, what string, f outboxadmin.Filter, opts outboxadmin.ChangeOptions) (*outboxadmin.Change, bool) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	ch, err := src.Events.Admin.Act(ctx, src.Events.DB, action, f, opts)
	if err != nil {
		src.fail(w, action+" of "+what, err)
		return nil, false
	}
	if src.Logger != nil {
		src.Logger.Info("console: operator action", "action", action, "selection", what, "consumer", f.Consumer, "by", opts.By,
			"dry_run", opts.DryRun, "count", ch.Count, "job_id", ch.JobID)
	}
	return ch, true
}

// crossSite says why r may come from another site's page ("" when it does
// not): browsers send Sec-Fetch-Site (same-origin, or none for what the user
// typed) and, on a POST, Origin, which must be the console's own: this
// listener's Host, the X-Forwarded-Host a proxy in front sets, or the
// configured public URL (http.public_url, for a proxy that forwards
// neither, as nginx does by default).
func (src Source) crossSite(r *http.Request) string {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		return "Sec-Fetch-Site is " + s
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return ""
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return "Origin " + o + " is not a web page's"
	}
	own := []string{r.Host}
	if fh := r.Header.Get("X-Forwarded-Host"); fh != "" {
		own = append(own, strings.TrimSpace(strings.Split(fh, ",")[0]))
	}
	if src.PublicURL != nil {
		if u.Scheme == src.PublicURL.Scheme && u.Host == src.PublicURL.Host {
			return ""
		}
	}
	if slices.Contains(own, u.Host) {
		return ""
	}
	why := "Origin " + o + " is not " + strings.Join(own, " or ")
	if src.PublicURL == nil {
		why += " (behind a proxy: set http.public_url to the console's address, or have the proxy forward Host or X-Forwarded-Host)"
	} else {
		why += " nor http.public_url " + src.PublicURL.Scheme + "://" + src.PublicURL.Host
	}
	return why
}

func (src Source) fail(w http.ResponseWriter, what string, err error) {
	var (
		uc      *outboxadmin.UnknownConsumerError
		ui      *outboxadmin.UnknownIndexError
		refused *outboxadmin.RefusedError
	)
	switch {
	case errors.As(err, &uc) || errors.As(err, &ui) || errors.Is(err, outboxadmin.ErrNoSelection):
		writeError(w, http.StatusBadRequest, err.Error())
		return
	case errors.As(err, &refused):
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	if src.Logger != nil {
		src.Logger.Warn("console: "+what, "err", err)
	}
	writeError(w, http.StatusInternalServerError, what+" failed: "+err.Error())
}
