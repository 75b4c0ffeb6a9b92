package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/backfill"
	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
)

// bfRows is the size of the backfill's source table.
const bfRows = 100_000

// bfFields are the customer fields a document must hold as the table does.
var bfFields = []string{"tenant_key", "code", "name", "email", "city", "status", "score"}

// TestBackfillUnderLiveChangesKilledAndResumed: a table of 100,000
// customers that predate searchsync is backfilled (`searchsync backfill`)
// while producers change, delete and re-create some of the same customers
// (each change and its outbox event in one transaction), and the relay
// delivers to a search consumer on a soft-delete index, one on a
// hard-delete index whose tombstones last 1 s, and a webhook that takes
// snapshots. The backfill is killed with SIGKILL after some chunks and
// resumed by a second run. Afterwards every document equals the table
// (fields and version; deletes as tombstones, or absent with no delete
// resurrected), the webhook saw every event in order per aggregate, every
// row got exactly one snapshot across both runs, and each snapshot sits
// between the producers' events of its aggregate as the lock promises.
func TestBackfillUnderLiveChangesKilledAndResumed(t *testing.T) {
	t.Parallel()
	began := time.Now()
	b := newBackfillWorld(t)
	ctx := context.Background()
	seed := b.seed(ctx)
	relay := b.w.run("relay")
	testenv.Eventually(t, 60*time.Second, func() bool { return b.gcDeletes() == "1s" },
		"the hard-delete index keeps tombstones 1 s (index.gc_deletes %q)", b.gcDeletes())

	prod := b.produce(200)
	first := b.backfill("backfill-1")
	// Kill it once some chunks are committed, well before the end.
	testenv.Eventually(t, 90*time.Second, func() bool { return b.job().Progress.Rows >= 30_000 },
		"the first backfill commits 30,000 rows (job: %+v)", b.job())
	first.cmd.Process.Signal(syscall.SIGKILL)
	<-first.done
	killed := b.job()
	if killed.State != "running" || killed.Progress.Phase == backfill.PhaseDone || killed.Progress.Rows >= bfRows {
		t.Fatalf("after SIGKILL the job should be running (stale) mid-way: %+v", killed)
	}
	var lastSnap int64
	b.scan(`SELECT coalesce(max(id), 0) FROM aa_outbox_event WHERE event_type = 'entity.customer.snapshot'`, &lastSnap)
	// `backfill status` calls it interrupted once the heartbeat is stale.
	testenv.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(b.cli("backfill", "status", "customers", "--stale-after", "2s"), "interrupted")
	}, "backfill status shows the killed job interrupted: %s", b.cli("backfill", "status", "customers", "--stale-after", "2s"))
	second := b.backfill("backfill-2", "--stale-after", "2s")
	testenv.Eventually(t, 120*time.Second, func() bool {
		select {
		case <-second.done:
			return true
		default:
			return false
		}
	}, "the second backfill finishes (job: %+v)", b.job())
	if second.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("second backfill exited %d:\n%s", second.cmd.ProcessState.ExitCode(), second.log.String())
	}
	testenv.Eventually(t, 120*time.Second, func() bool { return b.pending() < 2000 },
		"the relay catches up with the backfill (pending %d)", b.pending())
	ops := prod()
	testenv.Eventually(t, 120*time.Second, func() bool { return b.pending() == 0 },
		"every event dispatched to every consumer (not dispatched: %d)", b.pending())
	done := b.job()
	if done.State != backfill.StateSucceeded || done.Result == nil || !done.Result.Resumed {
		t.Fatalf("finished job: %+v", done)
	}
	snaps := b.checkSnapshots(seed, killed, lastSnap)
	b.checkWebhook()
	b.refresh()
	tr := b.truth()
	softBad := b.checkIndex(b.soft, tr, true)
	hardBad := b.checkIndex(b.hard, tr, false)
	relay.cmd.Process.Signal(syscall.SIGTERM)
	t.Logf("source %d rows; snapshot events %d (first run %d rows in %d chunks, killed; resumed run wrote the rest, job result %+v)",
		bfRows, snaps, killed.Progress.Rows, killed.Progress.Chunks, *done.Result)
	t.Logf("producers: %s; truth: %d live, %d deleted customers; mismatching documents: soft %d, hard %d; wall %s",
		ops, tr.live, len(tr.rows)-tr.live, softBad, hardBad, time.Since(began).Round(time.Second))
}

// bfWorld is the backfill test's world: the harness's world (database,
// webhook endpoint, relay processes) with a configuration of its own.
type bfWorld struct {
	t          *testing.T
	w          *world
	soft, hard string // the aliases
	hist       map[uuid.UUID][]bfEvent
}

func newBackfillWorld(t *testing.T) *bfWorld {
	w := &world{t: t, db: testenv.NewDB(t), hook: newEndpoint(t), listen: testenv.FreeAddr(t)}
	t.Cleanup(w.dumpOnFailure)
	b := &bfWorld{t: t, w: w, soft: testenv.Name("bfsoft"), hard: testenv.Name("bfhard")}
	for _, a := range []string{b.soft, b.hard} {
		ix := mapping.PhysicalName(a, 1)
		t.Cleanup(func() {
			req, _ := http.NewRequest(http.MethodDelete, testenv.EngineURL(t)+"/"+ix, nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "defs"), 0o755)
	def, err := os.ReadFile("../mapping/defs/customers.json")
	if err != nil {
		t.Fatal(err)
	}
	soft := strings.Replace(string(def), `"alias": "customers"`, `"alias": "`+b.soft+`"`, 1)
	hard := strings.Replace(string(def), `"alias": "customers"`, `"alias": "`+b.hard+`"`, 1)
	hard = strings.Replace(hard, `"delete_mode": "soft"`, `"delete_mode": "hard"`, 1)
	hard = strings.Replace(hard, `"refresh_interval": "1s"`, `"refresh_interval": "1s", "gc_deletes": "1s"`, 1)
	if !strings.Contains(hard, `"gc_deletes"`) || !strings.Contains(hard, `"hard"`) {
		t.Fatal("the hard-delete definition was not made (customers.json changed?)")
	}
	os.WriteFile(filepath.Join(dir, "defs", b.soft+".json"), []byte(soft), 0o644)
	os.WriteFile(filepath.Join(dir, "defs", b.hard+".json"), []byte(hard), 0o644)
	// The example's projection (schema_version 1: the payloads call the
	// display name `name`), once per index.
	proj := string(customer.ProjectionFile())
	item := proj[strings.Index(proj, "  - name: customer"):]
	if i := strings.Index(item, "\nupcasters:"); i >= 0 {
		item = item[:i+1] // the projection only: the file's upcasters go once, not per index
	}
	item = strings.Replace(item, "schema_version: 2", "schema_version: 1", 1)
	one := func(name, alias string) string {
		s := strings.Replace(item, "  - name: customer", "  - name: "+name, 1)
		return strings.Replace(s, "index: customers", "index: "+alias, 1)
	}
	os.WriteFile(filepath.Join(dir, "projections.yaml"), []byte("projections:\n"+one("soft", b.soft)+one("hard", b.hard)), 0o644)
	cfg := fmt.Sprintf(`database: {url: %q, schema: %s}
relay: {poll_interval: 500ms, lease_ttl: 3s}
engine: {kind: opensearch, urls: [%q]}
indexes: {definitions: defs, projections: [projections.yaml]}
http: {listen: %q}
log: {level: info, format: json}
compaction: {interval: -1s}
consumers:
  - {name: soft, type: search, search: {indexes: [%s]}}
  - {name: hard, type: search, search: {indexes: [%s]}}
  - {name: hook, type: webhook, webhook: {url: %q, secret: %q, concurrency: 32, timeout: 60s}}
routes:
  - {consumer: soft, event_types: ["entity.customer.*"]}
  - {consumer: hard, event_types: ["entity.customer.*"]}
  - {consumer: hook, event_types: ["entity.customer.*"], snapshots: true}
backfill:
  sources:
    - name: customers
      chunk_size: 1000
      query: |
        SELECT c.id AS aggregate_id, 'entity.customer.snapshot' AS event_type,
               jsonb_build_object('tenant_key', c.tenant, 'entity_type', 'customer', 'entity_id', c.id,
                 'code', c.code, 'version', c.version, 'before', '{}'::jsonb,
                 'after', jsonb_build_object('name', c.name, 'email', c.email, 'city', c.city,
                                             'status', c.status, 'score', c.score)) AS payload
        FROM %s.customer c WHERE NOT c.deleted
`, w.db.URL, w.db.Schema, testenv.EngineURL(t), w.listen, b.soft, b.hard, w.hook.URL+"/", secret, w.db.Schema)
	w.cfg = filepath.Join(dir, "searchsync.yaml")
	if err := os.WriteFile(w.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

// seed creates the source table with bfRows customers (versions 1 to 5, two
// tenants) and returns each one's version.
func (b *bfWorld) seed(ctx context.Context) map[uuid.UUID]int64 {
	b.t.Helper()
	for _, q := range []string{
		`CREATE TABLE customer (id uuid PRIMARY KEY, tenant text NOT NULL, code text NOT NULL, name text NOT NULL,
			email text NOT NULL, city text NOT NULL, status text NOT NULL, score int NOT NULL,
			version bigint NOT NULL, deleted boolean NOT NULL DEFAULT false)`,
		`INSERT INTO customer (id, tenant, code, name, email, city, status, score, version)
		 SELECT gen_random_uuid(), CASE WHEN g % 3 = 0 THEN 'acme' ELSE 'public' END, 'C-' || lpad(g::text, 6, '0'),
		        'Customer ' || g, 'c' || g || '@example.org', (ARRAY['Berlin','Wien','Zürich','Köln'])[1 + g % 4],
		        'active', g % 1000, 1 + g % 5
		 FROM generate_series(1, ` + fmt.Sprint(bfRows) + `) g`,
		`ANALYZE customer`,
	} {
		if _, err := b.w.db.Pool.Exec(ctx, q); err != nil {
			b.t.Fatalf("%s: %v", q, err)
		}
	}
	rows, err := b.w.db.Pool.Query(ctx, `SELECT id, version FROM customer`)
	if err != nil {
		b.t.Fatal(err)
	}
	seed := map[uuid.UUID]int64{}
	for rows.Next() {
		var id uuid.UUID
		var v int64
		if err := rows.Scan(&id, &v); err != nil {
			b.t.Fatal(err)
		}
		seed[id] = v
	}
	rows.Close()
	return seed
}

// backfill starts `searchsync backfill customers` with args.
func (b *bfWorld) backfill(name string, args ...string) *proc {
	b.t.Helper()
	p := &proc{cmd: exec.Command(binary, append([]string{"backfill", "customers", "-c", b.w.cfg}, args...)...), log: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "DATABASE_URL=", "SEARCHSYNC_CONFIG=", "SEARCHSYNC_ENGINE_URL=")
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	b.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
		if b.t.Failed() {
			s := p.log.String()
			b.t.Logf("--- log of %s (last 8000 bytes):\n%s", name, s[max(0, len(s)-8000):])
		}
	})
	return p
}

// cli runs a short searchsync command and returns its output.
func (b *bfWorld) cli(args ...string) string {
	cmd := exec.Command(binary, append(args, "-c", b.w.cfg)...)
	cmd.Env = append(os.Environ(), "DATABASE_URL=", "SEARCHSYNC_CONFIG=", "SEARCHSYNC_ENGINE_URL=")
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// job is the backfill job of the source as aa_job holds it (state as
// stored: running, succeeded, aborted).
func (b *bfWorld) job() backfill.JobInfo {
	jobs, err := backfill.List(context.Background(), b.w.db.Pool, "customers", 1, time.Hour)
	if err != nil || len(jobs) == 0 {
		return backfill.JobInfo{}
	}
	return jobs[0]
}

func (b *bfWorld) scan(q string, dst ...any) {
	b.t.Helper()
	if err := b.w.db.Pool.QueryRow(context.Background(), q).Scan(dst...); err != nil {
		b.t.Fatalf("%s: %v", q, err)
	}
}

func (b *bfWorld) pending() int {
	return b.w.count(`SELECT count(*) FROM aa_outbox_event WHERE status <> 'dispatched'`)
}

// produce changes customers of the table at about rate changes per
// second, each change and its event in one transaction: partial updates,
// deletes, re-creates of deleted customers (a higher version), and new
// customers. It returns the stop, which returns what was done.
func (b *bfWorld) produce(rate int) (stop func() string) {
	ctx, cancel := context.WithCancel(context.Background())
	// The customers changed: 3,000 spread over the key space, so that the
	// backfill meets some before and some after their changes.
	var hot []uuid.UUID
	rows, err := b.w.db.Pool.Query(ctx, `SELECT id FROM customer ORDER BY random() LIMIT 3000`)
	if err != nil {
		b.t.Fatal(err)
	}
	hot, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		b.t.Fatal(err)
	}
	p := &producer{pool: b.w, w: outbox.NewWriter(outbox.WriterConfig{Schema: b.w.db.Schema}), hot: hot}
	const workers = 4
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i)))
			tick := time.NewTicker(time.Second * workers / time.Duration(rate))
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				if err := p.change(ctx, rng); err != nil && ctx.Err() == nil {
					errs <- err
					return
				}
			}
		}()
	}
	var once sync.Once
	stop = func() string {
		once.Do(func() {
			cancel()
			wg.Wait()
			close(errs)
			for err := range errs {
				b.t.Errorf("producer: %v", err)
			}
		})
		return fmt.Sprintf("%d updates, %d deletes, %d re-creates, %d new customers",
			p.updates.Load(), p.deletes.Load(), p.recreates.Load(), p.creates.Load())
	}
	b.t.Cleanup(func() { stop() })
	return stop
}

type producer struct {
	pool                                 *world
	w                                    *outbox.Writer
	hot                                  []uuid.UUID
	updates, deletes, recreates, creates atomic.Int64
}

// change makes one change in one transaction: the row, then its event.
func (p *producer) change(ctx context.Context, rng *rand.Rand) error {
	tx, err := p.pool.db.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if rng.IntN(20) == 0 {
		return p.create(ctx, tx, rng)
	}
	id := p.hot[rng.IntN(len(p.hot))]
	var (
		c       custRow
		deleted bool
	)
	if err := tx.QueryRow(ctx, `SELECT tenant, code, name, email, city, status, score, version, deleted FROM customer WHERE id = $1 FOR UPDATE`, id).
		Scan(&c.tenant, &c.code, &c.name, &c.email, &c.city, &c.status, &c.score, &c.version, &deleted); err != nil {
		return err
	}
	state := c.state()
	var verb string
	var before, after map[string]any
	switch {
	case deleted: // re-create, with new fields and a higher version
		verb = "created"
		c.name, c.city, c.status, c.score = fmt.Sprintf("Reborn %d", rng.IntN(1e6)), "Hamburg", "draft", rng.IntN(1000)
		before, after = map[string]any{}, c.state()
		_, err = tx.Exec(ctx, `UPDATE customer SET deleted = false, name = $2, city = $3, status = $4, score = $5, version = version + 1 WHERE id = $1`,
			id, c.name, c.city, c.status, c.score)
		p.recreates.Add(1)
	case rng.IntN(5) == 0:
		verb = "deleted"
		before, after = state, map[string]any{}
		_, err = tx.Exec(ctx, `UPDATE customer SET deleted = true, version = version + 1 WHERE id = $1`, id)
		p.deletes.Add(1)
	default: // a partial update: one or two fields
		verb = "updated"
		before, after = map[string]any{}, map[string]any{}
		switch rng.IntN(3) {
		case 0:
			before["city"], after["city"] = c.city, []string{"Leipzig", "Bremen", "Wien"}[rng.IntN(3)]
		case 1:
			before["status"], after["status"] = c.status, []string{"suspended", "active", "vip"}[rng.IntN(3)]
		default:
			before["score"], after["score"] = c.score, rng.IntN(1000)
			before["name"], after["name"] = c.name, fmt.Sprintf("Renamed %d", rng.IntN(1e6))
		}
		_, err = tx.Exec(ctx, `UPDATE customer SET city = coalesce($2, city), status = coalesce($3, status),
			score = coalesce($4, score), name = coalesce($5, name), version = version + 1 WHERE id = $1`,
			id, after["city"], after["status"], after["score"], after["name"])
		p.updates.Add(1)
	}
	if err != nil {
		return err
	}
	c.version++
	return p.write(ctx, tx, id, c, verb, before, after)
}

func (p *producer) create(ctx context.Context, tx pgx.Tx, rng *rand.Rand) error {
	id := uuid.New()
	n := rng.IntN(1e6)
	c := custRow{tenant: "public", code: fmt.Sprintf("N-%06d", n), name: fmt.Sprintf("New %d", n), email: fmt.Sprintf("n%d@example.org", n),
		city: "Bremen", status: "draft", score: n % 1000, version: 1}
	if _, err := tx.Exec(ctx, `INSERT INTO customer (id, tenant, code, name, email, city, status, score, version) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1)`,
		id, c.tenant, c.code, c.name, c.email, c.city, c.status, c.score); err != nil {
		return err
	}
	p.creates.Add(1)
	return p.write(ctx, tx, id, c, "created", map[string]any{}, c.state())
}

func (p *producer) write(ctx context.Context, tx pgx.Tx, id uuid.UUID, c custRow, verb string, before, after map[string]any) error {
	payload, _ := json.Marshal(map[string]any{
		"tenant_key": c.tenant, "entity_type": "customer", "entity_id": id, "code": c.code, "version": c.version,
		"before": before, "after": after, "actor": map[string]any{"principal_type": "user", "principal_id": "producer"},
	})
	ev := outbox.Event{EventType: "entity.customer." + verb, AggregateType: "DDM_ENTITY", AggregateID: &id, Payload: payload}
	if _, err := p.w.Write(ctx, tx, ev); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// custRow is a customer of the table.
type custRow struct {
	tenant, code, name, email, city, status string
	score                                   int
	version                                 int64
	deleted                                 bool
}

// state is the row's fields in a payload's `after` (the full state).
func (c custRow) state() map[string]any {
	return map[string]any{"name": c.name, "email": c.email, "city": c.city, "status": c.status, "score": c.score}
}

// field is the row's value of a document field, as JSON decodes it.
func (c custRow) field(f string) any {
	switch f {
	case "tenant_key":
		return c.tenant
	case "code":
		return c.code
	case "score":
		return float64(c.score)
	}
	return c.state()[f]
}

// bfEvent is an event of the outbox as the checks read it.
type bfEvent struct {
	id, version int64
	verb        string // created, updated, deleted, snapshot
}

// history reads every event of the outbox per aggregate, in id order.
func (b *bfWorld) history() map[uuid.UUID][]bfEvent {
	rows, err := b.w.db.Pool.Query(context.Background(),
		`SELECT aggregate_id, id, (payload->>'version')::bigint, split_part(event_type, '.', 3) FROM aa_outbox_event ORDER BY id`)
	if err != nil {
		b.t.Fatal(err)
	}
	defer rows.Close()
	out := map[uuid.UUID][]bfEvent{}
	for rows.Next() {
		var agg uuid.UUID
		var e bfEvent
		if err := rows.Scan(&agg, &e.id, &e.version, &e.verb); err != nil {
			b.t.Fatal(err)
		}
		out[agg] = append(out[agg], e)
	}
	b.hist = out
	return out
}

// checkSnapshots checks the snapshot events: at most one per customer
// across both runs, exactly one for every customer of the seed that was
// never deleted, as many as the job says it wrote; the first run's before
// its last committed key, the resumed run's after it; and each snapshot
// holds the version of the event before it (or the seed's) while the
// producers' events after it continue from there. It returns how many.
func (b *bfWorld) checkSnapshots(seed map[uuid.UUID]int64, killed backfill.JobInfo, lastSnap int64) int {
	t := b.t
	total, firstRun, dup, missing, wrongSide, torn := 0, 0, 0, 0, 0, 0
	var examples []string
	example := func(agg uuid.UUID, evs []bfEvent, why string) {
		if len(examples) < 5 {
			examples = append(examples, fmt.Sprintf("%s %s: %+v", why, agg, evs))
		}
	}
	for agg, evs := range b.history() {
		n, everDeleted := 0, false
		cur, deleted := seed[agg], false
		for _, e := range evs {
			switch e.verb {
			case "snapshot":
				n++
				total++
				if e.id <= lastSnap {
					firstRun++
				}
				// The first run wrote keys up to its last committed one,
				// the resumed run only keys after it.
				if (e.id <= lastSnap) != (agg.String() <= killed.Progress.LastKey) {
					wrongSide++
					example(agg, evs, "snapshot on the wrong side of the resume key")
				}
				if e.version != cur || deleted {
					torn++
					example(agg, evs, fmt.Sprintf("snapshot of version %d, state before it %d (deleted %v)", e.version, cur, deleted))
				}
			default:
				if e.version != cur+1 {
					torn++
					example(agg, evs, fmt.Sprintf("%s of version %d after version %d", e.verb, e.version, cur))
				}
				cur, deleted = e.version, e.verb == "deleted"
				everDeleted = everDeleted || deleted
			}
		}
		if n > 1 {
			dup++
			example(agg, evs, "more than one snapshot")
		}
		if _, seeded := seed[agg]; seeded && !everDeleted && n == 0 {
			missing++
		}
	}
	done := b.job()
	if dup != 0 || missing != 0 || wrongSide != 0 || torn != 0 || int64(total) != done.Result.Rows || int64(firstRun) != killed.Progress.Rows {
		t.Errorf("snapshots: %d written (job says %d), first run %d (its job progress said %d); customers with more than one %d, "+
			"never-deleted seed customers without one %d, on the wrong side of the resume key %d, out of step with the producers' versions %d; e.g. %v",
			total, done.Result.Rows, firstRun, killed.Progress.Rows, dup, missing, wrongSide, torn, examples)
	}
	return total
}

// checkWebhook checks that the endpoint received every event of the outbox
// (snapshots included) and every aggregate's events in id order.
func (b *bfWorld) checkWebhook() {
	t := b.t
	var ids, snaps []int64
	for _, evs := range b.history() {
		for _, e := range evs {
			ids = append(ids, e.id)
			if e.verb == "snapshot" {
				snaps = append(snaps, e.id)
			}
		}
	}
	lost := 0
	for _, id := range ids {
		if !b.w.hook.has([]int64{id}) {
			lost++
		}
	}
	if lost != 0 || !b.w.hook.has(snaps) {
		t.Errorf("webhook: %d of %d events never arrived (snapshots all there: %v)", lost, len(ids), b.w.hook.has(snaps))
	}
	if n, which := b.w.hook.outOfOrder(); n != 0 {
		t.Errorf("webhook: %d aggregates out of order (first arrivals): %v", n, which)
	}
	t.Logf("webhook: %d events (%d snapshots), %d duplicates", len(ids), len(snaps), b.w.hook.duplicates())
}

// bfTruth is the table: every customer, deleted ones included.
type bfTruth struct {
	rows map[uuid.UUID]custRow
	live int
}

func (b *bfWorld) truth() bfTruth {
	rows, err := b.w.db.Pool.Query(context.Background(), `SELECT id, tenant, code, name, email, city, status, score, version, deleted FROM customer`)
	if err != nil {
		b.t.Fatal(err)
	}
	defer rows.Close()
	tr := bfTruth{rows: map[uuid.UUID]custRow{}}
	for rows.Next() {
		var id uuid.UUID
		var c custRow
		if err := rows.Scan(&id, &c.tenant, &c.code, &c.name, &c.email, &c.city, &c.status, &c.score, &c.version, &c.deleted); err != nil {
			b.t.Fatal(err)
		}
		tr.rows[id] = c
		if !c.deleted {
			tr.live++
		}
	}
	return tr
}

// refresh makes every write of both indexes visible to the scroll.
func (b *bfWorld) refresh() {
	for _, a := range []string{b.soft, b.hard} {
		resp, err := http.Post(testenv.EngineURL(b.t)+"/"+mapping.PhysicalName(a, 1)+"/_refresh", "application/json", nil)
		if err != nil {
			b.t.Fatal(err)
		}
		resp.Body.Close()
	}
}

// gcDeletes is index.gc_deletes of the hard-delete index ("" before it
// exists).
func (b *bfWorld) gcDeletes() string {
	resp, err := http.Get(testenv.EngineURL(b.t) + "/" + mapping.PhysicalName(b.hard, 1) + "/_settings/index.gc_deletes?flat_settings=true")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var s map[string]struct {
		Settings map[string]string `json:"settings"`
	}
	json.NewDecoder(resp.Body).Decode(&s)
	return s[mapping.PhysicalName(b.hard, 1)].Settings["index.gc_deletes"]
}

// bfDoc is a document of a physical index.
type bfDoc struct {
	version int64
	source  map[string]any
}

// docs reads every document of the alias's physical index (tombstones
// included) with its version.
func (b *bfWorld) docs(alias string) map[uuid.UUID]bfDoc {
	base := testenv.EngineURL(b.t)
	type page struct {
		ScrollID string `json:"_scroll_id"`
		Hits     struct {
			Hits []struct {
				ID      string         `json:"_id"`
				Version int64          `json:"_version"`
				Source  map[string]any `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	get := func(url, body string) *page {
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			b.t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.t.Fatalf("%s: %s", url, resp.Status)
		}
		var p page
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
			b.t.Fatal(err)
		}
		return &p
	}
	out := map[uuid.UUID]bfDoc{}
	p := get(base+"/"+mapping.PhysicalName(alias, 1)+"/_search?scroll=1m",
		`{"size": 5000, "version": true, "sort": ["_doc"], "query": {"match_all": {}}}`)
	for len(p.Hits.Hits) > 0 {
		for _, h := range p.Hits.Hits {
			id, err := uuid.Parse(h.ID)
			if err != nil {
				b.t.Fatalf("document id %q", h.ID)
			}
			out[id] = bfDoc{h.Version, h.Source}
		}
		sid, _ := json.Marshal(p.ScrollID)
		p = get(base+"/_search/scroll", `{"scroll": "1m", "scroll_id": `+string(sid)+`}`)
	}
	req, _ := http.NewRequest(http.MethodDelete, base+"/_search/scroll/"+p.ScrollID, nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	return out
}

// checkIndex compares the alias's documents with the table: a live
// customer's document holds its fields and version (soft: not a
// tombstone), a deleted one's is a tombstone of its version (soft) or
// absent (hard: one present is a resurrected delete). It returns how many
// documents differ.
func (b *bfWorld) checkIndex(alias string, tr bfTruth, soft bool) int {
	docs := b.docs(alias)
	kinds := map[string]int{}
	examples := map[string][]string{}
	bad := func(kind string, id uuid.UUID, format string, args ...any) {
		kinds[kind]++
		if len(examples[kind]) < 3 {
			examples[kind] = append(examples[kind], id.String()+": "+fmt.Sprintf(format, args...))
		}
	}
	for id, c := range tr.rows {
		d, ok := docs[id]
		switch {
		case c.deleted && !soft:
			if ok {
				bad("resurrected delete", id, "table version %d, document version %d %v", c.version, d.version, d.source)
			}
		case !ok:
			bad("no document", id, "table version %d (deleted %v)", c.version, c.deleted)
		case d.version != c.version:
			bad("version", id, "table %d, document %d", c.version, d.version)
		case soft && d.source["deleted"] != c.deleted:
			bad("tombstone", id, "table deleted %v, document %v", c.deleted, d.source)
		case !c.deleted:
			var lacks, differs []string
			for _, f := range bfFields {
				v, has := d.source[f]
				switch {
				case !has:
					lacks = append(lacks, f)
				case v != c.field(f):
					differs = append(differs, fmt.Sprintf("%s %v, table %v", f, v, c.field(f)))
				}
			}
			if len(lacks) > 0 {
				bad("fields missing", id, "lacks %v (version %d): %v; its events: %+v", lacks, c.version, d.source, b.hist[id])
			} else if len(differs) > 0 {
				bad("fields differ", id, "%v", differs)
			}
		}
	}
	for id := range docs {
		if _, ok := tr.rows[id]; !ok {
			bad("no such customer", id, "%v", docs[id].source)
		}
	}
	n := 0
	for kind, k := range kinds {
		n += k
		b.t.Errorf("index %s (%s deletes): %d documents: %s; e.g. %v", alias, map[bool]string{true: "soft", false: "hard"}[soft], k, kind, examples[kind])
	}
	b.t.Logf("index %s: %d documents for %d customers, %d differ", alias, len(docs), len(tr.rows), n)
	return n
}
