package outboxadmin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/outbox"
)

// The operator actions list, retry, ack and skip (their SQL and the package
// notes are in admin.go).

// List returns the events the filter selects, by id, with their delivery
// rows. A zero Limit means 100. With Filter.Consumer it lists what that
// consumer still owes or parked (its state pending or failed, or the states
// in Filter.Statuses).
func (a *Admin) List(ctx context.Context, db DB, f Filter) ([]Listed, error) {
	f, err := a.ResolveIndex(f)
	if err != nil {
		return nil, err
	}
	f.Limit = cmp.Or(f.Limit, 100)
	var evs []Listed
	if f.Consumer != "" {
		states, serr := consumerStates(f.Statuses, []outbox.Status{outbox.StatusPending, outbox.StatusFailed}, "list")
		if serr != nil {
			return nil, serr
		}
		evs, err = a.selectOwed(ctx, db, f, states, "")
	} else {
		evs, err = a.selectEvents(ctx, db, a.q.list, f.args(), "")
	}
	if err != nil {
		return nil, fmt.Errorf("outbox: list events in %s.aa_outbox_event: %w", a.schema, err)
	}
	if err := a.loadDeliveries(ctx, db, evs, f.Consumer, ""); err != nil {
		return nil, fmt.Errorf("outbox: list events in %s.aa_outbox_event: %w", a.schema, err)
	}
	return evs, nil
}

func scanEvent(row pgx.CollectableRow) (outbox.Event, error) {
	var e outbox.Event
	var st string
	err := row.Scan(&e.ID, &e.TenantID, &e.EventType, &e.SchemaVersion, &e.AggregateType, &e.AggregateID, &e.AuditLogID,
		&e.CorrelationID, &e.Payload, &st, &e.Attempts, &e.LastError, &e.AvailableAt, &e.DispatchedAt, &e.CreatedAt, &e.CreatedBy)
	e.Status = outbox.Status(st)
	return e, err
}

// consumerStates checks statuses given with a consumer: they are the
// consumer's states, pending or failed (def when none is given).
func consumerStates(statuses, def []outbox.Status, action string) ([]string, error) {
	if len(statuses) == 0 {
		statuses = def
	}
	var out []string
	for _, s := range statuses {
		if !slices.Contains(def, s) {
			return nil, fmt.Errorf("outbox: %s for a consumer: status is the consumer's state, one of %s, not %s", action, joinStatuses(def), s)
		}
		out = append(out, string(s))
	}
	return out, nil
}

func joinStatuses(ss []outbox.Status) string {
	var out []string
	for _, s := range ss {
		out = append(out, string(s))
	}
	return strings.Join(out, ", ")
}

// selectEvents runs a selection of eventColumns; lock appends a locking
// clause.
func (a *Admin) selectEvents(ctx context.Context, db DB, sql string, args []any, lock string) ([]Listed, error) {
	rows, err := db.Query(ctx, sql+lock, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Listed, error) {
		e, err := scanEvent(row)
		return Listed{Event: e}, err
	})
}

// selectOwed selects what f.Consumer owes in the given states: first the
// kinds of events without delivery rows that are routed to it, then the
// events.
func (a *Admin) selectOwed(ctx context.Context, db DB, f Filter, states []string, lock string) ([]Listed, error) {
	if err := a.CheckConsumer(f.Consumer); err != nil {
		return nil, err
	}
	args := f.args()
	pairArgs := slices.Clone(args[:11])
	pairArgs[10] = f.errorLike() // the outbox row of an event without delivery rows is the consumer's
	rows, err := db.Query(ctx, a.q.routedPairs, append(pairArgs, states)...)
	if err != nil {
		return nil, fmt.Errorf("kinds of events routed to %s: %w", f.Consumer, err)
	}
	etypes, atypes := []string{}, []string{}
	var etype, atype string
	if _, err := pgx.ForEachRow(rows, []any{&etype, &atype}, func() error {
		if a.routing.Routed(f.Consumer, etype, atype) {
			etypes, atypes = append(etypes, etype), append(atypes, atype)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("kinds of events routed to %s: %w", f.Consumer, err)
	}
	return a.selectEvents(ctx, db, a.q.selectOwed, append(args, f.Consumer, states, etypes, atypes, f.errorLike()), lock)
}

// loadDeliveries attaches the delivery rows of evs; consumer, when set, gets
// the shared state of events without rows. lock appends a locking clause.
func (a *Admin) loadDeliveries(ctx context.Context, db DB, evs []Listed, consumer, lock string) error {
	if len(evs) == 0 {
		return nil
	}
	ids := make([]int64, len(evs))
	at := make(map[int64]int, len(evs))
	for i, e := range evs {
		ids[i], at[e.ID] = e.ID, i
	}
	rows, err := db.Query(ctx, a.q.deliveries+lock, ids)
	if err != nil {
		return fmt.Errorf("read delivery rows: %w", err)
	}
	var (
		id    int64
		d     Delivery
		state string
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &d.Consumer, &state, &d.Attempts, &d.LastError, &d.AvailableAt, &d.DeliveredAt}, func() error {
		d.State = DeliveryState(state)
		evs[at[id]].Deliveries = append(evs[at[id]].Deliveries, d)
		return nil
	}); err != nil {
		return fmt.Errorf("read delivery rows: %w", err)
	}
	if consumer != "" {
		for i := range evs {
			if e := &evs[i]; len(e.Deliveries) == 0 {
				e.Deliveries = []Delivery{sharedDelivery(consumer, &e.Event)}
			}
		}
	}
	return nil
}

func sharedDelivery(consumer string, e *outbox.Event) Delivery {
	st := DeliveryState(e.Status)
	if e.Status == outbox.StatusDispatched {
		st = DeliveryDone
	}
	return Delivery{Consumer: consumer, State: st, Attempts: e.Attempts, LastError: e.LastError, AvailableAt: e.AvailableAt,
		DeliveredAt: e.DispatchedAt, Shared: true}
}

// ChangeOptions say how a retry, ack or skip runs.
type ChangeOptions struct {
	// DryRun selects and reports, changing nothing (no aa_job row either).
	DryRun bool
	// All allows a selection without ids or a narrowing filter.
	All bool
	// By names the operator in aa_job.owner and the result. Required unless
	// DryRun.
	By string
	// Note is free text recorded with the action (why).
	Note string
}

// Change is what a retry, ack or skip did (or, in a dry run, would do).
type Change struct {
	Action string `json:"action"` // retry, ack or skip
	// Consumer is the consumer the change was for ("" for all).
	Consumer string         `json:"consumer,omitempty"`
	DryRun   bool           `json:"dry_run"`
	Count    int            `json:"count"`
	Events   []ChangedEvent `json:"events"`
	// JobID is the aa_job row that records the change (0 in a dry run or
	// when nothing matched).
	JobID int64 `json:"job_id,omitempty"`
}

// ChangedEvent is an event a change touched, as it is after the change (a
// deleted one, and every event of a dry run, as it was), with what happened
// to it (in a dry run: "would be …").
type ChangedEvent struct {
	Listed
	// Outcome says what the change did: retried, retried for <consumers>,
	// deleted, acknowledged for <consumer>; deleted (the others have it),
	// acknowledged for <consumer>; pending for <consumers>, skipped,
	// skipped; <consumers> marked done, not delivered.
	Outcome string `json:"outcome"`
	// Deleted is true when the event left the table.
	Deleted bool `json:"deleted,omitempty"`

	before Listed // for the aa_job record
}

// Retry moves the selected failed events, and the failed delivery rows of
// the selected events, back to pending with attempts 0 and available_at
// now(); with Filter.Consumer only that consumer's (see the notes in
// admin.go).
func (a *Admin) Retry(ctx context.Context, db DB, f Filter, opts ChangeOptions) (*Change, error) {
	for _, s := range f.Statuses {
		if s != outbox.StatusFailed {
			return nil, refusef("outbox: retry applies to failed events only, not %s", s)
		}
	}
	return a.change(ctx, db, "retry", f, opts)
}

// Ack acknowledges the selected failed and skipped events: they are deleted
// and the acknowledgement is recorded in aa_job. With Filter.Consumer it
// acknowledges that consumer's failed deliveries only (see the notes in
// admin.go).
func (a *Admin) Ack(ctx context.Context, db DB, f Filter, opts ChangeOptions) (*Change, error) {
	for _, s := range f.Statuses {
		if s != outbox.StatusFailed && (s != outbox.StatusSkipped || f.Consumer != "") {
			if f.Consumer != "" {
				return nil, refusef("outbox: ack for a consumer applies to its failed deliveries only, not %s", s)
			}
			return nil, refusef("outbox: ack applies to failed and skipped events only, not %s", s)
		}
	}
	return a.change(ctx, db, "ack", f, opts)
}

// Skip sets the selected failed events skipped: they no longer block their
// aggregates (only pending and failed events do), keep their rows and
// last_error as evidence, and stay until acknowledged (Ack). The failed
// delivery rows of an event whose consumers diverged are marked done (not
// delivered: delivered_at stays NULL), so that they stop blocking their
// consumers too. It refuses Filter.Consumer (one consumer's failed delivery
// marked done is Ack with a consumer), statuses other than failed, and ids
// of events that are not failed (see the notes in admin.go).
func (a *Admin) Skip(ctx context.Context, db DB, f Filter, opts ChangeOptions) (*Change, error) {
	if f.Consumer != "" {
		return nil, refusef("outbox: skip takes no consumer: to mark one consumer's failed delivery done without delivering it, ack it for that consumer (outbox ack --consumer %s)", f.Consumer)
	}
	for _, s := range f.Statuses {
		if s != outbox.StatusFailed {
			return nil, refusef("outbox: skip applies to failed events only, not %s", s)
		}
	}
	f.Statuses = nil
	return a.change(ctx, db, "skip", f, opts)
}

// Actions are the operator actions Act runs.
var Actions = []string{"retry", "ack", "skip"}

// Act runs the operator action named: retry, ack or skip. The CLI and the
// console's actions call it.
func (a *Admin) Act(ctx context.Context, db DB, action string, f Filter, opts ChangeOptions) (*Change, error) {
	switch action {
	case "retry":
		return a.Retry(ctx, db, f, opts)
	case "ack":
		return a.Ack(ctx, db, f, opts)
	case "skip":
		return a.Skip(ctx, db, f, opts)
	}
	return nil, refusef("outbox: unknown action %q: want %s", action, strings.Join(Actions, ", "))
}

// RefusedError is an action that does not apply to what it names (a
// status, an event in another state, a consumer where it takes none):
// nothing was done, and running it again will not help.
type RefusedError struct{ msg string }

func (e *RefusedError) Error() string { return e.msg }

func refusef(format string, args ...any) error {
	return &RefusedError{msg: fmt.Sprintf(format, args...)}
}

// plan is what a change writes, filled from the locked rows.
type plan struct {
	retryWhole     []int64  // events without delivery rows: failed → pending
	rowIDs         []int64  // delivery rows to change (retry: → pending; ack: → done)
	rowConsumers   []string //
	insIDs         []int64  // delivery rows to insert (an ack splits an event)
	insConsumers   []string
	insStates      []string
	insAttempts    []int32
	insErrors      []*string
	skip           []int64 // failed → skipped
	summarise      []int64 // events whose outbox row follows their delivery rows
	deleteWhole    []int64 // unqualified ack
	deleteFinished []int64 // ack for a consumer that finished the event
	events         []ChangedEvent
}

func (a *Admin) change(ctx context.Context, db DB, action string, f Filter, opts ChangeOptions) (*Change, error) {
	index := f.Index
	f, err := a.ResolveIndex(f)
	if err != nil {
		return nil, err
	}
	if action == "skip" && index != "" && f.Consumer != "" {
		f.Consumer = "" // the index's consumer: skip acts on the events as a whole
	}
	if f.Consumer != "" {
		if err := a.CheckConsumer(f.Consumer); err != nil {
			return nil, err
		}
	}
	if !f.Narrows() && !opts.All {
		return nil, ErrNoSelection
	}
	if !opts.DryRun && strings.TrimSpace(opts.By) == "" {
		return nil, fmt.Errorf("outbox: %s: say who acts (By)", action)
	}
	ch := &Change{Action: action, Consumer: f.Consumer, DryRun: opts.DryRun}
	lock := " FOR UPDATE"
	if opts.DryRun {
		lock = ""
	}
	var statuses []string // of the outbox rows an unqualified ack or a skip takes
	switch {
	case action == "ack" && f.Consumer == "":
		statuses = f.statusStrings()
		if len(statuses) == 0 {
			statuses = []string{string(outbox.StatusFailed), string(outbox.StatusSkipped)}
		}
	case action == "skip":
		statuses = []string{string(outbox.StatusFailed)}
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var (
			evs []Listed
			err error
		)
		switch {
		case f.Consumer != "":
			evs, err = a.selectOwed(ctx, tx, f, []string{string(outbox.StatusFailed)}, lock)
		case action == "retry":
			args := f.args()
			args[1] = nil // the statuses are failed only, and the selection takes failed delivery rows too
			evs, err = a.selectEvents(ctx, tx, a.q.selectRetry, args, lock)
		default:
			evs, err = a.selectEvents(ctx, tx, a.q.selectStatus, append(f.args(), statuses), lock)
		}
		if err != nil {
			return fmt.Errorf("select events: %w", err)
		}
		// The delivery rows are read (and locked) in a statement of their
		// own, after the events are locked: it sees every change committed
		// before the locks were granted.
		if err := a.loadDeliveries(ctx, tx, evs, "", lock); err != nil {
			return err
		}
		p := a.plan(action, f.Consumer, evs)
		if action == "skip" {
			if err := a.checkNamed(ctx, tx, f, p.events); err != nil {
				return err
			}
		}
		ch.Events, ch.Count = p.events, len(p.events)
		if opts.DryRun {
			// A dry run shows each event as it is and says what the
			// change would do to it.
			for i := range ch.Events {
				e := &ch.Events[i]
				e.Listed, e.Outcome = e.before, "would be "+e.Outcome
			}
			return nil
		}
		if ch.Count == 0 {
			return nil
		}
		if err := a.apply(ctx, tx, action, p); err != nil {
			return err
		}
		params, _ := json.Marshal(auditParams(f, statuses, opts))
		result, _ := json.Marshal(auditResult(ch, opts))
		if err := tx.QueryRow(ctx, a.q.recordJob, jobKind(action), opts.By, params, result).Scan(&ch.JobID); err != nil {
			return fmt.Errorf("record the %s in aa_job: %w", action, err)
		}
		// Wake the relays: a retried event is due now; an acknowledged or
		// skipped head unblocks its aggregate.
		if _, err := tx.Exec(ctx, a.q.notify, a.q.channel); err != nil {
			return fmt.Errorf("notify: %w", err)
		}
		return nil
	})
	if err != nil {
		var refused *RefusedError
		if errors.As(err, &refused) {
			return nil, err
		}
		if opts.DryRun {
			return nil, fmt.Errorf("outbox: %s (dry run) in %s: %w", action, a.schema, err)
		}
		return nil, fmt.Errorf("outbox: %s in %s: %w", action, a.schema, err)
	}
	if ch.Events == nil {
		ch.Events = []ChangedEvent{}
	}
	return ch, nil
}

// checkNamed refuses a skip that names ids of events it does not take
// (not failed, or not in the outbox), unless a limit may have cut them.
func (a *Admin) checkNamed(ctx context.Context, tx pgx.Tx, f Filter, taken []ChangedEvent) error {
	if len(f.IDs) == 0 || (f.Limit > 0 && len(taken) >= f.Limit) {
		return nil
	}
	got := make(map[int64]bool, len(taken))
	for _, e := range taken {
		got[e.ID] = true
	}
	var missing []int64
	for _, id := range f.IDs {
		if !got[id] && !slices.Contains(missing, id) {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	evs, err := a.selectEvents(ctx, tx, a.q.list, Filter{IDs: missing}.args(), "")
	if err != nil {
		return fmt.Errorf("read the events named: %w", err)
	}
	status := map[int64]outbox.Status{}
	for _, e := range evs {
		status[e.ID] = e.Status
	}
	var why []string
	for _, id := range missing {
		switch st, ok := status[id]; {
		case !ok:
			why = append(why, fmt.Sprintf("event %d is not in the outbox", id))
		case st == outbox.StatusFailed:
			why = append(why, fmt.Sprintf("event %d is failed but not selected (the filter leaves it out, or a consumer still has it pending)", id))
		default:
			why = append(why, fmt.Sprintf("event %d is %s", id, st))
		}
	}
	return refusef("outbox: skip applies to failed events only: %s; nothing done", strings.Join(why, ", "))
}

func jobKind(action string) string {
	switch action {
	case "retry":
		return JobKindRetry
	case "skip":
		return JobKindSkip
	}
	return JobKindAck
}

// plan decides, from the locked events and their delivery rows, what the
// change writes and how each event looks afterwards. Events that no longer
// qualify (the relay changed them before the lock) are left out.
func (a *Admin) plan(action, consumer string, evs []Listed) *plan {
	p := &plan{}
	now := time.Now()
	for _, l := range evs {
		ce := ChangedEvent{Listed: l, before: l}
		ce.Deliveries = slices.Clone(l.Deliveries)
		e := &ce.Listed
		split := e.split()
		switch {
		case action == "retry" && !split:
			if e.Status != outbox.StatusFailed || (consumer != "" && !a.routing.Routed(consumer, e.EventType, e.AggregateType)) {
				continue
			}
			p.retryWhole = append(p.retryWhole, e.ID)
			e.Status, e.Attempts, e.AvailableAt = outbox.StatusPending, 0, now
			ce.Outcome = "retried"
		case action == "retry":
			var names []string
			for i := range e.Deliveries {
				d := &e.Deliveries[i]
				if d.State != DeliveryFailed || (consumer != "" && d.Consumer != consumer) {
					continue
				}
				p.rowIDs, p.rowConsumers = append(p.rowIDs, e.ID), append(p.rowConsumers, d.Consumer)
				d.State, d.Attempts, d.AvailableAt = DeliveryPending, 0, now
				names = append(names, d.Consumer)
			}
			if len(names) == 0 {
				continue
			}
			p.summarise = append(p.summarise, e.ID)
			summarise(&e.Event, e.Deliveries)
			ce.Outcome = "retried for " + strings.Join(names, ", ")
		case action == "skip":
			// (A failed outbox row has no pending delivery row: it would be
			// pending. One that has is the relay's, not a skip's.)
			if e.Status != outbox.StatusFailed || slices.ContainsFunc(e.Deliveries, func(d Delivery) bool { return d.State == DeliveryPending }) {
				continue
			}
			var names []string
			for i := range e.Deliveries {
				if d := &e.Deliveries[i]; d.State == DeliveryFailed {
					p.rowIDs, p.rowConsumers = append(p.rowIDs, e.ID), append(p.rowConsumers, d.Consumer)
					d.State = DeliveryDone
					names = append(names, d.Consumer)
				}
			}
			p.skip = append(p.skip, e.ID)
			e.Status = outbox.StatusSkipped
			ce.Outcome = "skipped"
			if len(names) > 0 {
				ce.Outcome += "; " + strings.Join(names, ", ") + " marked done, not delivered"
			}
		case consumer == "":
			// Unqualified ack: the statement checks the status again.
			p.deleteWhole = append(p.deleteWhole, e.ID)
			ce.Outcome, ce.Deleted = "deleted", true
		case split:
			d := e.Delivery(consumer)
			if d == nil || d.State != DeliveryFailed {
				continue
			}
			p.rowIDs, p.rowConsumers = append(p.rowIDs, e.ID), append(p.rowConsumers, consumer)
			d.State = DeliveryDone
			var open []string
			for _, o := range e.Deliveries {
				if o.State != DeliveryDone {
					open = append(open, o.Consumer+" "+string(o.State))
				}
			}
			if len(open) == 0 {
				p.deleteFinished = append(p.deleteFinished, e.ID)
				ce.Outcome, ce.Deleted = "acknowledged for "+consumer+"; deleted (every other consumer has it)", true
			} else {
				p.summarise = append(p.summarise, e.ID)
				summarise(&e.Event, e.Deliveries)
				ce.Outcome = "acknowledged for " + consumer + "; " + strings.Join(open, ", ")
			}
		default:
			// An ack for one consumer of a failed event without delivery rows.
			if e.Status != outbox.StatusFailed || !a.routing.Routed(consumer, e.EventType, e.AggregateType) {
				continue
			}
			var others []string
			for _, c := range a.routing.To(e.EventType, e.AggregateType) {
				if c != consumer {
					others = append(others, c)
				}
			}
			if len(others) == 0 {
				p.deleteFinished = append(p.deleteFinished, e.ID)
				ce.Outcome, ce.Deleted = "acknowledged for "+consumer+"; deleted (routed to "+consumer+" alone)", true
				ce.Deliveries = []Delivery{sharedDelivery(consumer, &e.Event)}
				break
			}
			e.Deliveries = nil
			for _, c := range append([]string{consumer}, others...) {
				d := Delivery{Consumer: c, State: DeliveryPending, AvailableAt: now}
				if c == consumer {
					d.State, d.Attempts, d.LastError = DeliveryDone, e.Attempts, e.LastError
				}
				e.Deliveries = append(e.Deliveries, d)
				p.insIDs, p.insConsumers, p.insStates = append(p.insIDs, e.ID), append(p.insConsumers, c), append(p.insStates, string(d.State))
				p.insAttempts, p.insErrors = append(p.insAttempts, int32(d.Attempts)), append(p.insErrors, d.LastError)
			}
			slices.SortFunc(e.Deliveries, func(x, y Delivery) int { return strings.Compare(x.Consumer, y.Consumer) })
			p.summarise = append(p.summarise, e.ID)
			summarise(&e.Event, e.Deliveries)
			ce.Outcome = "acknowledged for " + consumer + "; pending for " + strings.Join(others, ", ")
		}
		p.events = append(p.events, ce)
	}
	return p
}

// summarise sets the report's outbox row from its delivery rows as
// summariseSQL does.
func summarise(e *outbox.Event, ds []Delivery) {
	var pending, failed bool
	var next time.Time
	attempts := 0
	for _, d := range ds {
		attempts = max(attempts, d.Attempts)
		switch d.State {
		case DeliveryPending:
			if !pending || d.AvailableAt.Before(next) {
				next = d.AvailableAt
			}
			pending = true
		case DeliveryFailed:
			failed = true
		}
	}
	switch {
	case pending:
		e.Status, e.AvailableAt = outbox.StatusPending, next
	case failed:
		e.Status = outbox.StatusFailed
	}
	e.Attempts = attempts
}

// apply writes the plan; every statement must change exactly the rows the
// plan expects, or nothing is done.
func (a *Admin) apply(ctx context.Context, tx pgx.Tx, action string, p *plan) error {
	rowsSQL, rowsWhat := a.q.ackDeliveries, "acknowledge delivery rows"
	switch action {
	case "retry":
		rowsSQL, rowsWhat = a.q.retryDeliveries, "retry delivery rows"
	case "skip":
		rowsWhat = "mark the failed delivery rows of skipped events done"
	}
	for _, st := range []struct {
		what string
		want int
		sql  string
		args []any
	}{
		{fmt.Sprintf("retry %d events", len(p.retryWhole)), len(p.retryWhole), a.q.retry, []any{p.retryWhole}},
		{rowsWhat, len(p.rowIDs), rowsSQL, []any{p.rowIDs, p.rowConsumers}},
		{"split events into delivery rows", len(p.insIDs), a.q.insertDeliveries, []any{p.insIDs, p.insConsumers, p.insStates, p.insAttempts, p.insErrors}},
		{fmt.Sprintf("skip %d events", len(p.skip)), len(p.skip), a.q.skip, []any{p.skip}},
		{"summarise events", len(p.summarise), a.q.summarise, []any{p.summarise}},
		{fmt.Sprintf("ack %d events", len(p.deleteWhole)), len(p.deleteWhole), a.q.ack, []any{p.deleteWhole}},
		{"delete finished events", len(p.deleteFinished), a.q.finish, []any{p.deleteFinished}},
	} {
		if st.want == 0 {
			continue
		}
		tag, err := tx.Exec(ctx, st.sql, st.args...)
		if err != nil {
			return fmt.Errorf("%s: %w", st.what, err)
		}
		if int(tag.RowsAffected()) != st.want {
			return fmt.Errorf("%s: %d of %d locked rows changed; nothing done", st.what, tag.RowsAffected(), st.want)
		}
	}
	return nil
}

func auditParams(f Filter, statuses []string, opts ChangeOptions) map[string]any {
	p := map[string]any{}
	if statuses != nil {
		p["statuses"] = statuses
	}
	if f.Consumer != "" {
		p["consumer"] = f.Consumer
	}
	if len(f.IDs) > 0 {
		p["ids"] = f.IDs
	}
	if f.EventType != "" {
		p["event_type"] = f.EventType
	}
	if f.AggregateType != "" {
		p["aggregate_type"] = f.AggregateType
	}
	if f.Index != "" {
		p["index"] = f.Index
	}
	if f.Kinds != nil {
		p["kinds"] = f.Kinds
	}
	if f.Error != "" {
		p["error"] = f.Error
	}
	if f.AggregateID != nil {
		p["aggregate_id"] = f.AggregateID
	}
	if !f.Since.IsZero() {
		p["since"] = f.Since
	}
	if !f.Until.IsZero() {
		p["until"] = f.Until
	}
	if f.Limit > 0 {
		p["limit"] = f.Limit
	}
	if opts.All {
		p["all"] = true
	}
	return p
}

// auditEvent is one event described in an aa_job result: the outbox row as
// it was before the change, and what the change did.
type auditEvent struct {
	ID            int64         `json:"id"`
	Status        outbox.Status `json:"status"`
	EventType     string        `json:"event_type"`
	AggregateType string        `json:"aggregate_type"`
	AggregateID   *uuid.UUID    `json:"aggregate_id"`
	Attempts      int           `json:"attempts"`
	LastError     *string       `json:"last_error"`
	CreatedAt     time.Time     `json:"created_at"`
	// Deliveries are the event's delivery rows before the change.
	Deliveries []Delivery `json:"deliveries,omitempty"`
	Outcome    string     `json:"outcome"`
}

func auditResult(ch *Change, opts ChangeOptions) map[string]any {
	evs := ch.Events
	ids := make([]int64, len(evs))
	byType := map[string]int{}
	details := make([]auditEvent, 0, min(len(evs), maxAuditDetails))
	for i, e := range evs {
		ids[i] = e.ID
		byType[e.EventType]++
		if i < maxAuditDetails {
			b := e.before
			details = append(details, auditEvent{b.ID, b.Status, b.EventType, b.AggregateType, b.AggregateID,
				b.Attempts, b.LastError, b.CreatedAt, b.Deliveries, e.Outcome})
		}
	}
	slices.Sort(ids)
	r := map[string]any{
		"count": len(evs), "by": opts.By, "ids": ids, "event_types": byType, "events": details,
	}
	if ch.Consumer != "" {
		r["consumer"] = ch.Consumer
	}
	if len(evs) > maxAuditDetails {
		r["events_truncated"] = true
	}
	if opts.Note != "" {
		r["note"] = opts.Note
	}
	return r
}
