package dashboard

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
)

// ActionsRequest is the JSON body of POST /api/actions: one action on ids,
// one aggregate or a filter (exactly one of them), run as the CLI runs it.
type ActionsRequest struct {
	// Action is retry, ack or skip.
	Action string `json:"action"`
	// Consumer limits the action to one consumer's share (the CLI's
	// --consumer); Filter.Consumer says the same.
	Consumer string `json:"consumer"`
	// Note is recorded with the action in aa_job.
	Note      string           `json:"note"`
	IDs       []int64          `json:"ids"`
	Aggregate *ActionAggregate `json:"aggregate"`
	Filter    *ActionFilter    `json:"filter"`
	// All allows a filter that narrows nothing (the CLI's --all).
	All bool `json:"all"`
	// DryRun answers what would change, changing nothing.
	DryRun bool `json:"dry_run"`
}

// ActionAggregate names one aggregate: its type (literal) and id.
type ActionAggregate struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// ActionFilter is a selection as GET /api/events takes it.
type ActionFilter struct {
	// Status is failed, skipped or pending (each action refuses what it
	// does not take); "": what the action takes.
	Status        string `json:"status"`
	Consumer      string `json:"consumer"`
	EventType     string `json:"event_type"`
	AggregateType string `json:"aggregate_type"`
	// Index selects the events whose projection writes this index, Error
	// the events whose last_error matches this pattern (as GET /api/events'
	// index and error).
	Index string `json:"index"`
	Error string `json:"error"`
}

// ActionsAnswer is the JSON of POST /api/actions: the change (as
// `searchsync outbox retry --json` prints it) with its events cut to the
// first maxAnswerEvents, without payloads.
type ActionsAnswer struct {
	*outboxadmin.Change
	// IDs are the ids of the first maxAnswerIDs events changed (in a dry
	// run: that would be).
	IDs []int64 `json:"ids"`
	// More counts the changed events left out of events.
	More int `json:"more"`
}

const (
	maxActionIDs    = 1000
	maxAnswerEvents = 20
	maxAnswerIDs    = 100
)

// actions serves POST /api/actions.
func (src Source) actions(w http.ResponseWriter, r *http.Request) {
	by, ok := src.operator(w, r)
	if !ok {
		return
	}
	var req ActionsRequest
	if !decodeBody(w, r, &req, false) {
		return
	}
	f, what, err := req.filter()
	if err == nil && f.Consumer != "" {
		err = src.Events.Admin.CheckConsumer(f.Consumer)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ch, ok := src.change(w, r, req.Action, what, f, outboxadmin.ChangeOptions{By: by, Note: req.Note, All: req.All, DryRun: req.DryRun})
	if !ok {
		return
	}
	ans := ActionsAnswer{Change: ch, IDs: []int64{}}
	for i, e := range ch.Events {
		if i < maxAnswerIDs {
			ans.IDs = append(ans.IDs, e.ID)
		}
	}
	if len(ch.Events) > maxAnswerEvents {
		ans.More = len(ch.Events) - maxAnswerEvents
		ch.Events = ch.Events[:maxAnswerEvents]
	}
	for i := range ch.Events {
		ch.Events[i].Payload = nil
	}
	writeJSON(w, http.StatusOK, ans)
}

// filter checks the request and turns it into the outbox selection; what
// describes it for the log and errors.
func (req *ActionsRequest) filter() (outboxadmin.Filter, string, error) {
	var f outboxadmin.Filter
	if !slices.Contains(outboxadmin.Actions, req.Action) {
		return f, "", fmt.Errorf("action %q: want %s", req.Action, strings.Join(outboxadmin.Actions, ", "))
	}
	var given []string
	if len(req.IDs) > 0 {
		given = append(given, "ids")
	}
	if req.Aggregate != nil {
		given = append(given, "aggregate")
	}
	if req.Filter != nil {
		given = append(given, "filter")
	}
	switch len(given) {
	case 0:
		return f, "", fmt.Errorf("name what to %s: exactly one of ids, aggregate or filter", req.Action)
	case 1:
	default:
		return f, "", fmt.Errorf("%s: give exactly one of ids, aggregate or filter", strings.Join(given, " and "))
	}
	f.Consumer = req.Consumer
	var what string
	switch {
	case len(req.IDs) > 0:
		if len(req.IDs) > maxActionIDs {
			return f, "", fmt.Errorf("ids: %d given, at most %d (use a filter)", len(req.IDs), maxActionIDs)
		}
		for _, id := range req.IDs {
			if id < 1 {
				return f, "", fmt.Errorf("ids: %d is not an event id (want positive integers)", id)
			}
		}
		f.IDs = req.IDs
		what = fmt.Sprintf("%d event ids", len(req.IDs))
	case req.Aggregate != nil:
		a := req.Aggregate
		id, err := uuid.Parse(a.ID)
		if err != nil {
			return f, "", fmt.Errorf("aggregate.id %q: want a UUID", a.ID)
		}
		if a.Type == "" || strings.ContainsAny(a.Type, "*?") {
			return f, "", fmt.Errorf("aggregate.type %q: want the aggregate type itself (no * or ?)", a.Type)
		}
		f.AggregateType, f.AggregateID = a.Type, &id
		what = "aggregate " + a.Type + "/" + id.String()
	default:
		ff := req.Filter
		if ff.Consumer != "" && req.Consumer != "" && ff.Consumer != req.Consumer {
			return f, "", fmt.Errorf("consumer %q and filter.consumer %q differ: give one", req.Consumer, ff.Consumer)
		}
		f.Consumer = cmp.Or(ff.Consumer, req.Consumer)
		switch st := outbox.Status(ff.Status); st {
		case "":
		case outbox.StatusFailed, outbox.StatusSkipped, outbox.StatusPending:
			f.Statuses = []outbox.Status{st}
		default:
			return f, "", fmt.Errorf("filter.status %q: want failed, skipped or pending", ff.Status)
		}
		f.EventType, f.AggregateType, f.Index, f.Error = ff.EventType, ff.AggregateType, ff.Index, ff.Error
		if err := checkError("filter.error", f.Error); err != nil {
			return f, "", err
		}
		if !f.Narrows() && !req.All {
			return f, "", fmt.Errorf(`filter narrows nothing (status and consumer alone select every such event): add filter.event_type, filter.aggregate_type, filter.index or filter.error, or say "all": true`)
		}
		what = fmt.Sprintf("filter status=%q consumer=%q event_type=%q aggregate_type=%q index=%q error=%q", ff.Status, f.Consumer,
			ff.EventType, ff.AggregateType, ff.Index, ff.Error)
	}
	return f, what, nil
}
