package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// WriterConfig configures a Writer.
type WriterConfig struct {
	// Schema that holds aa_outbox_event. Default "mdm".
	Schema string
}

// Writer writes events inside a caller's transaction. It is safe for
// concurrent use.
type Writer struct {
	q queries
}

// NewWriter returns a Writer for the configured schema.
func NewWriter(cfg WriterConfig) *Writer {
	return &Writer{q: newQueries(cmp.Or(cfg.Schema, "mdm"))}
}

// Channel is the NOTIFY channel the writer signals on commit.
func (w *Writer) Channel() string { return w.q.channel }

// Lock takes, in tx, the advisory lock of every aggregate key (aggregate
// type and id) that Write takes, in the same order. A service that emits
// snapshot events of rows it reads (a backfill of its own, docs/backfill.md)
// calls Lock before it reads them and Write after, in one transaction: every
// change of those aggregates then commits either before the read (and the
// snapshot holds it) or after the snapshot's events (and comes after them
// in id order).
func (w *Writer) Lock(ctx context.Context, tx pgx.Tx, aggregates ...Aggregate) error {
	if len(aggregates) == 0 {
		return nil
	}
	types := make([]string, len(aggregates))
	ids := make([]pgtype.UUID, len(aggregates))
	for i, a := range aggregates {
		types[i], ids[i] = a.Type, pgtype.UUID{Bytes: a.ID, Valid: true}
	}
	if _, err := tx.Exec(ctx, w.q.lockAggregates, types, ids); err != nil {
		return fmt.Errorf("outbox: lock %d aggregates: %w", len(aggregates), err)
	}
	return nil
}

// Aggregate names one aggregate: its type and id.
type Aggregate struct {
	Type string
	ID   uuid.UUID
}

// Write validates the events, then inserts them in tx in one round trip: an
// advisory lock per aggregate key (in a fixed order, so two writers cannot
// deadlock), one INSERT for all rows, and a NOTIFY delivered at commit. It
// returns the new ids in the order of events. On a validation error nothing is
// sent to the database and the error lists every bad field (see FieldError).
func (w *Writer) Write(ctx context.Context, tx pgx.Tx, events ...Event) ([]int64, error) {
	if len(events) == 0 {
		return nil, nil
	}
	var errs []error
	for i := range events {
		if err := events[i].Validate(i); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	n := len(events)
	var (
		tenant  = make([]pgtype.UUID, n)
		etype   = make([]string, n)
		schemaV = make([]int32, n)
		atype   = make([]string, n)
		aid     = make([]pgtype.UUID, n)
		audit   = make([]*int64, n)
		corr    = make([]pgtype.UUID, n)
		payload = make([]string, n)
		by      = make([]*string, n)
	)
	var lockTypes []string
	var lockIDs []pgtype.UUID
	for i := range events {
		e := &events[i]
		etype[i], atype[i], audit[i] = e.EventType, e.AggregateType, e.AuditLogID
		tenant[i], aid[i], corr[i] = pgUUID(e.TenantID), pgUUID(e.AggregateID), pgUUID(e.CorrelationID)
		schemaV[i] = int32(cmp.Or(e.SchemaVersion, 1))
		payload[i] = string(e.Payload)
		if e.CreatedBy != "" {
			by[i] = &e.CreatedBy
		}
		if e.AggregateID != nil {
			lockTypes = append(lockTypes, e.AggregateType)
			lockIDs = append(lockIDs, aid[i])
		}
	}

	b := &pgx.Batch{}
	if len(lockIDs) > 0 {
		b.Queue(w.q.lockAggregates, lockTypes, lockIDs)
	}
	b.Queue(w.q.insertEvents, tenant, etype, schemaV, atype, aid, audit, corr, payload, by)
	b.Queue(w.q.notify, w.q.channel)
	res := tx.SendBatch(ctx, b)
	defer res.Close()
	if len(lockIDs) > 0 {
		if _, err := res.Exec(); err != nil {
			return nil, fmt.Errorf("outbox: lock aggregates: %w", err)
		}
	}
	rows, err := res.Query()
	if err != nil {
		return nil, fmt.Errorf("outbox: insert %d events: %w", n, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("outbox: insert %d events: %w", n, err)
	}
	if _, err := res.Exec(); err != nil {
		return nil, fmt.Errorf("outbox: notify: %w", err)
	}
	if err := res.Close(); err != nil {
		return nil, fmt.Errorf("outbox: write: %w", err)
	}
	return ids, nil
}

// pgUUID is id as pgx encodes it cheaply (a nil id is NULL): a
// *uuid.UUID would go through driver.Valuer, text and an error per element.
func pgUUID(id *uuid.UUID) pgtype.UUID {
	if id == nil {
		return pgtype.UUID{}
	}
	return pgtype.UUID{Bytes: *id, Valid: true}
}
