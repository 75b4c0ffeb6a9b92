package backfill

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/routing"
)

// Source is one backfill source as the configuration declares it
// (backfill.sources[] in docs/configuration.md).
type Source struct {
	// Name identifies the source: `searchsync backfill <name>`, the job's
	// key, `--seed source:<name>`. Required.
	Name string `yaml:"name" json:"name"`
	// Query is a SELECT over the platform's tables that yields one row per
	// snapshot event, with the columns aggregate_id (uuid), event_type (text,
	// ending in ".snapshot"), payload (jsonb or json: the whole state with
	// its version, in the shape the projections read) and, optionally,
	// tenant_id (uuid), schema_version (integer), aggregate_type (text) and
	// the Key column. No ORDER BY, LIMIT or trailing semicolon: the backfill
	// wraps it. Required.
	Query string `yaml:"query" json:"query"`
	// Key is the query's column the rows are read in order of, by keyset
	// pagination (unique, not null, with an index on the table behind it).
	// Default aggregate_id.
	Key string `yaml:"key" json:"key"`
	// AggregateType of the events when the query has no aggregate_type
	// column. Default DDM_ENTITY.
	AggregateType string `yaml:"aggregate_type" json:"aggregate_type"`
	// ChunkSize is the rows read, locked and written per transaction.
	// Default 1000.
	ChunkSize int `yaml:"chunk_size" json:"chunk_size"`
	// Rate bounds the rows read per second; 0 (the default) is unbounded.
	Rate float64 `yaml:"rate" json:"rate"`
	// MaxBacklog pauses the backfill while more events than this are
	// pending in the outbox (of any kind), so that a live event waits behind
	// at most about this many events and a chunk. Default 2000: about
	// 0.3 s at the rate a relay delivers a backfill's snapshots on a small
	// machine (10,000 a second), which keeps a live event's commit →
	// searchable within a second of what it is without a backfill
	// (docs/benchmarks.md, Backfill).
	MaxBacklog int `yaml:"max_backlog" json:"max_backlog"`
}

// Defaults of a Source.
const (
	DefaultKey           = "aggregate_id"
	DefaultAggregateType = "DDM_ENTITY"
	DefaultChunkSize     = 1000
	DefaultMaxBacklog    = 2000
)

var (
	nameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)
	columnRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
)

// WithDefaults returns s with every unset field at its default.
func (s Source) WithDefaults() Source {
	s.Key = cmp.Or(s.Key, DefaultKey)
	s.AggregateType = cmp.Or(s.AggregateType, DefaultAggregateType)
	s.ChunkSize = cmp.Or(s.ChunkSize, DefaultChunkSize)
	s.MaxBacklog = cmp.Or(s.MaxBacklog, DefaultMaxBacklog)
	return s
}

// Problem is one invalid field of a source: Field is its key below the
// source (query, key, …).
type Problem struct{ Field, Reason string }

// Check returns what is wrong with the source as written (before defaults
// apply); what only the database can tell (the query's columns) is checked
// by Open.
func (s Source) Check() []Problem {
	var ps []Problem
	bad := func(f, r string) { ps = append(ps, Problem{f, r}) }
	if s.Name == "" {
		bad("name", "is required")
	} else if !nameRE.MatchString(s.Name) {
		bad("name", fmt.Sprintf("%q is not lower case letters, digits, '_', '-', '.'", s.Name))
	}
	q := strings.TrimSpace(s.Query)
	switch {
	case q == "":
		bad("query", "is required (a SELECT yielding aggregate_id, event_type, payload)")
	case strings.HasSuffix(q, ";"):
		bad("query", "ends in ';': the backfill wraps the query, leave the semicolon out")
	}
	if s.Key != "" && !columnRE.MatchString(s.Key) {
		bad("key", fmt.Sprintf("%q is not a plain column name of the query (lower case)", s.Key))
	}
	if s.AggregateType != "" {
		e := outbox.Event{EventType: "x.y", AggregateType: s.AggregateType, Payload: json.RawMessage("{}")}
		if err := e.Validate(0); err != nil {
			bad("aggregate_type", fmt.Sprintf("%q is not a table-like name (e.g. DDM_ENTITY)", s.AggregateType))
		}
	}
	if s.ChunkSize < 0 || s.ChunkSize > 100000 {
		bad("chunk_size", fmt.Sprintf("%d is not in 1..100000", s.ChunkSize))
	}
	if s.Rate < 0 {
		bad("rate", fmt.Sprintf("%g is negative (0: unbounded)", s.Rate))
	}
	if s.MaxBacklog < 0 {
		bad("max_backlog", fmt.Sprintf("%d is negative", s.MaxBacklog))
	}
	return ps
}

// querier is what reads need of a pool, a connection or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// The columns a source query yields.
const (
	colAggregateID   = "aggregate_id"
	colEventType     = "event_type"
	colPayload       = "payload"
	colTenantID      = "tenant_id"
	colSchemaVersion = "schema_version"
	colAggregateType = "aggregate_type"
)

// Postgres type oids the columns are checked against.
var (
	uuidOIDs = map[uint32]bool{2950: true}
	textOIDs = map[uint32]bool{25: true, 1043: true, 19: true, 1042: true}
	jsonOIDs = map[uint32]bool{114: true, 3802: true, 25: true}
	intOIDs  = map[uint32]bool{20: true, 21: true, 23: true}
)

// Reader reads a source's rows in key order, a chunk at a time. It is
// safe for concurrent use.
type Reader struct {
	src     Source
	keyType string

	countSQL, keysFirstSQL, keysNextSQL, rowsSQL, readFirstSQL, readNextSQL string
	// insertSQL writes a chunk's events in the database (insert.go): set
	// when the payload column is jsonb or json, which the database checks as
	// it parses it. A text payload comes through searchsync (rowsSQL), which
	// checks it is JSON.
	insertSQL string
}

// Open checks the source's query against the database (its columns and
// their types, the key's type) and prepares its statements. Errors name the
// source and the column.
func Open(ctx context.Context, db querier, src Source) (*Reader, error) {
	src = src.WithDefaults()
	if ps := src.Check(); len(ps) > 0 {
		errs := make([]error, len(ps))
		for i, p := range ps {
			errs[i] = fmt.Errorf("backfill source %s: %s: %s", src.Name, p.Field, p.Reason)
		}
		return nil, errors.Join(errs...)
	}
	query := strings.TrimSpace(src.Query)
	rows, err := db.Query(ctx, "SELECT * FROM ("+query+"\n) s LIMIT 0")
	if err != nil {
		return nil, fmt.Errorf("backfill source %s: query: %w", src.Name, err)
	}
	fields := rows.FieldDescriptions()
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("backfill source %s: query: %w", src.Name, err)
	}
	types := map[string]uint32{}
	for _, f := range fields {
		types[f.Name] = f.DataTypeOID
	}
	var errs []error
	need := func(col, what string, ok map[uint32]bool, required bool) bool {
		oid, has := types[col]
		switch {
		case !has && required:
			errs = append(errs, fmt.Errorf("backfill source %s: query: yields no column %s (%s)", src.Name, col, what))
		case has && !ok[oid]:
			errs = append(errs, fmt.Errorf("backfill source %s: query: column %s is of type oid %d, not %s", src.Name, col, oid, what))
		}
		return has
	}
	need(colAggregateID, "uuid", uuidOIDs, true)
	need(colEventType, "text", textOIDs, true)
	need(colPayload, "jsonb", jsonOIDs, true)
	hasTenant := need(colTenantID, "uuid", uuidOIDs, false)
	hasSchema := need(colSchemaVersion, "integer", intOIDs, false)
	hasAggType := need(colAggregateType, "text", textOIDs, false)
	keyOID, ok := types[src.Key]
	if !ok {
		errs = append(errs, fmt.Errorf("backfill source %s: key: the query yields no column %s", src.Name, src.Key))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	r := &Reader{src: src}
	if err := db.QueryRow(ctx, "SELECT format_type($1::oid, NULL)", keyOID).Scan(&r.keyType); err != nil {
		return nil, fmt.Errorf("backfill source %s: key type: %w", src.Name, err)
	}
	r.prepare(query, hasTenant, hasSchema, hasAggType, types[colPayload] != 25)
	return r, nil
}

func (r *Reader) prepare(query string, hasTenant, hasSchema, hasAggType, jsonPayload bool) {
	key := "s." + pgx.Identifier{r.src.Key}.Sanitize()
	from := " FROM (" + query + "\n) s "
	after := key + " > $1::text::" + r.keyType
	order := " ORDER BY " + key + " LIMIT $2"
	aggType := "$3::text"
	if hasAggType {
		aggType = "coalesce(s.aggregate_type::text, $3::text)"
	}
	tenant, schema := "NULL::uuid", "1"
	if hasTenant {
		tenant = "s.tenant_id"
	}
	if hasSchema {
		schema = "s.schema_version::int"
	}
	cols := key + "::text, s.aggregate_id, s.event_type::text, s.payload::text, " + tenant + ", " + schema + ", " + aggType
	keyCols := key + "::text, s.aggregate_id, " + aggType
	r.countSQL = "SELECT count(*)" + from
	r.keysFirstSQL = "SELECT " + keyCols + from + "WHERE $1::text IS NULL" + order
	r.keysNextSQL = "SELECT " + keyCols + from + "WHERE " + after + order
	r.readFirstSQL = "SELECT " + cols + from + "WHERE $1::text IS NULL" + order
	r.readNextSQL = "SELECT " + cols + from + "WHERE " + after + order
	// The chunk's rows again, after their aggregates are locked: the key
	// range of the chunk (chunk keeps those of the aggregates locked). A
	// condition on the locked ids here would make the plan probe the key's
	// index once per id (about 18 µs of PostgreSQL CPU a row) instead of
	// reading the range.
	r.rowsSQL = "SELECT " + cols + from + "WHERE " + key + " >= $1::text::" + r.keyType + " AND " + key + " <= $2::text::" + r.keyType +
		" ORDER BY " + key
	if jsonPayload {
		r.prepareInsert(key, from, tenant, schema, aggType)
	}
}

// Source is the source read, with its defaults.
func (r *Reader) Source() Source { return r.src }

// Count returns how many rows the source yields now.
func (r *Reader) Count(ctx context.Context, db querier) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, r.countSQL).Scan(&n); err != nil {
		return 0, fmt.Errorf("backfill source %s: count: %w", r.src.Name, err)
	}
	return n, nil
}

// Row is one row of a source: its key (as text) and the snapshot event it
// becomes.
type Row struct {
	Key   string
	Event outbox.Event
}

// Read returns up to n rows after the key after ("" with first: from the
// start), in key order, in one statement (one snapshot). It takes no lock:
// what reads for an index directly (reindex --seed source:…) uses it, and a
// dry run.
func (r *Reader) Read(ctx context.Context, db querier, after string, first bool, n int) ([]Row, error) {
	sql, arg := r.readNextSQL, any(after)
	if first {
		sql, arg = r.readFirstSQL, nil
	}
	return r.scanRows(db.Query(ctx, sql, arg, n, r.src.AggregateType))
}

// RowError is a row the backfill cannot turn into an event: the source, the
// row's key and what is wrong. Nothing of its chunk is written.
type RowError struct {
	Source, Key, Reason string
}

func (e *RowError) Error() string {
	return fmt.Sprintf("backfill source %s: row with key %s: %s", e.Source, e.Key, e.Reason)
}

func (r *Reader) scanRows(rows pgx.Rows, err error) ([]Row, error) {
	return r.scanKept(rows, err, nil)
}

// scanKept is scanRows keeping only the rows whose aggregate keep holds
// (nil: every row); the others are left out before they are checked.
func (r *Reader) scanKept(rows pgx.Rows, err error, keep map[uuid.UUID]bool) ([]Row, error) {
	if err != nil {
		return nil, fmt.Errorf("backfill source %s: read: %w", r.src.Name, err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var (
			row     Row
			key     *string
			payload *string
			etype   *string
			aggType *string
			schema  *int32
		)
		e := &row.Event
		if err := rows.Scan(&key, &e.AggregateID, &etype, &payload, &e.TenantID, &schema, &aggType); err != nil {
			return nil, fmt.Errorf("backfill source %s: read: %w", r.src.Name, err)
		}
		if keep != nil && (e.AggregateID == nil || !keep[*e.AggregateID]) {
			continue // not locked: a row that came into the chunk's range after its keys were read
		}
		if key == nil {
			return nil, &RowError{Source: r.src.Name, Key: "NULL", Reason: fmt.Sprintf("the key column %s is NULL", r.src.Key)}
		}
		row.Key = *key
		if err := r.fill(&row, etype, payload, aggType, schema); err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("backfill source %s: read: %w", r.src.Name, err)
	}
	return out, nil
}

// fill completes the row's event and checks it as outbox.Writer would.
func (r *Reader) fill(row *Row, etype, payload, aggType *string, schema *int32) error {
	e := &row.Event
	bad := func(reason string) error { return &RowError{Source: r.src.Name, Key: row.Key, Reason: reason} }
	if e.AggregateID == nil {
		return bad("aggregate_id is NULL")
	}
	if etype != nil {
		e.EventType = *etype
	}
	if aggType != nil {
		e.AggregateType = *aggType
	}
	if payload != nil {
		e.Payload = json.RawMessage(*payload)
	}
	e.SchemaVersion = 1
	if schema != nil {
		e.SchemaVersion = int(*schema)
	}
	if err := e.Validate(0); err != nil {
		return bad(strings.ReplaceAll(err.Error(), "outbox: event 0: ", ""))
	}
	if !routing.IsSnapshot(e.EventType) {
		return bad(fmt.Sprintf("event_type %q does not end in %q: a backfill writes snapshot events only", e.EventType, routing.SnapshotSuffix))
	}
	return nil
}

// chunk writes the events of one chunk in tx: it reads the keys after
// after (statement 1), takes the advisory lock of every aggregate among
// them (outbox.Writer.Lock, the producers' lock), then writes the events of
// the rows of those aggregates in the chunk's key range, read again after
// the lock: in one statement (insert), or through searchsync and
// outbox.Writer.Write for a text payload. last is the chunk's last key; no
// rows and last "" mean the source is done.
func (r *Reader) chunk(ctx context.Context, tx pgx.Tx, w *outbox.Writer, o emit, after string, first bool, n int) (written int, last string, err error) {
	keys, aggs, err := r.keys(ctx, tx, after, first, n)
	if err != nil || len(keys) == 0 {
		return 0, "", err
	}
	if err := w.Lock(ctx, tx, aggs...); err != nil {
		return 0, "", fmt.Errorf("backfill source %s: %w", r.src.Name, err)
	}
	last = keys[len(keys)-1]
	if r.insertSQL != "" {
		ids := make([]pgtype.UUID, len(aggs))
		for i, a := range aggs {
			ids[i] = pgtype.UUID{Bytes: a.ID, Valid: true}
		}
		written, err = r.insert(ctx, tx, w, o, keys[0], last, ids)
		return written, last, err
	}
	keep := make(map[uuid.UUID]bool, len(aggs))
	for _, a := range aggs {
		keep[a.ID] = true
	}
	rr, err := tx.Query(ctx, r.rowsSQL, keys[0], last, r.src.AggregateType)
	rows, err := r.scanKept(rr, err, keep)
	if err != nil {
		return 0, "", err
	}
	events := make([]outbox.Event, len(rows))
	for i := range rows {
		events[i] = rows[i].Event
		events[i].CorrelationID = &o.correlation
		events[i].CreatedBy = o.createdBy
	}
	if _, err := w.Write(ctx, tx, events...); err != nil {
		return 0, "", fmt.Errorf("backfill source %s: write %d events: %w", r.src.Name, len(events), err)
	}
	return len(events), last, nil
}

// keys reads the keys of the next chunk and the aggregates of its rows.
func (r *Reader) keys(ctx context.Context, tx pgx.Tx, after string, first bool, n int) (keys []string, aggs []outbox.Aggregate, err error) {
	sql, arg := r.keysNextSQL, any(after)
	if first {
		sql, arg = r.keysFirstSQL, nil
	}
	kr, err := tx.Query(ctx, sql, arg, n, r.src.AggregateType)
	if err != nil {
		return nil, nil, fmt.Errorf("backfill source %s: read keys: %w", r.src.Name, err)
	}
	defer kr.Close()
	for kr.Next() {
		var (
			k   *string
			id  *uuid.UUID
			typ *string
		)
		if err := kr.Scan(&k, &id, &typ); err != nil {
			return nil, nil, fmt.Errorf("backfill source %s: read keys: %w", r.src.Name, err)
		}
		switch {
		case k == nil:
			return nil, nil, &RowError{Source: r.src.Name, Key: "NULL", Reason: fmt.Sprintf("the key column %s is NULL", r.src.Key)}
		case len(keys) > 0 && *k == keys[len(keys)-1]:
			return nil, nil, &RowError{Source: r.src.Name, Key: *k, Reason: fmt.Sprintf("two rows have this key: the key column %s must be unique", r.src.Key)}
		case id == nil:
			return nil, nil, &RowError{Source: r.src.Name, Key: *k, Reason: "aggregate_id is NULL"}
		}
		keys = append(keys, *k)
		if typ != nil {
			aggs = append(aggs, outbox.Aggregate{Type: *typ, ID: *id})
		}
	}
	kr.Close()
	if err := kr.Err(); err != nil {
		return nil, nil, fmt.Errorf("backfill source %s: read keys: %w", r.src.Name, err)
	}
	return keys, aggs, nil
}

// since is a small helper for rates: seconds since t, never 0.
func since(t time.Time) float64 { return max(time.Since(t).Seconds(), 1e-3) }
