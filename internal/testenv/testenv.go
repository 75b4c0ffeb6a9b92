// Package testenv gives tests the real services they run against: a
// PostgreSQL database with a fresh, migrated schema per test, and a search
// engine URL with a unique index prefix per test.
//
// Services are found in this order: the URLs in DATABASE_URL /
// SEARCHSYNC_ENGINE_URL (set by scripts/services.sh and .ci/run); local
// defaults that answer (postgres://searchsync:searchsync@127.0.0.1:5432/searchsync,
// http://127.0.0.1:9200); containers started by testcontainers-go when a Docker
// engine is reachable. When none works the test fails with a message that says
// how to start the services; it never skips.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/searchsync/searchsync/migrations"
)

// DefaultDatabaseURL is where scripts/services.sh starts PostgreSQL.
const DefaultDatabaseURL = "postgres://searchsync:searchsync@127.0.0.1:5432/searchsync?sslmode=disable"

// DefaultEngineURL is where scripts/opensearch.sh starts OpenSearch.
const DefaultEngineURL = "http://127.0.0.1:9200"

const startHint = "start the services with `scripts/services.sh start` (or set DATABASE_URL / SEARCHSYNC_ENGINE_URL)"

var databaseService = service("no PostgreSQL", startHint, findDatabase)

// DatabaseURL returns the URL of a reachable PostgreSQL server.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	return databaseService(t)
}

func findDatabase() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u, ping(ctx, u)
	}
	if ping(ctx, DefaultDatabaseURL) == nil {
		return DefaultDatabaseURL, nil
	}
	if DockerAvailable() {
		url, err := startPostgresContainer()
		if err != nil {
			err = permanent{err}
		}
		return url, err
	}
	return "", fmt.Errorf("DATABASE_URL is not set, nothing answers at %s and no Docker engine is reachable", DefaultDatabaseURL)
}

func ping(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

var engineService = service("no search engine", startHint, findEngine)

// EngineURL returns the URL of a reachable OpenSearch (or Elasticsearch) node.
func EngineURL(t testing.TB) string {
	t.Helper()
	return engineService(t)
}

func findEngine() (string, error) {
	if u := os.Getenv("SEARCHSYNC_ENGINE_URL"); u != "" {
		return u, engineHealthy(u)
	}
	if engineHealthy(DefaultEngineURL) == nil {
		return DefaultEngineURL, nil
	}
	return "", fmt.Errorf("SEARCHSYNC_ENGINE_URL is not set and nothing answers at %s", DefaultEngineURL)
}

func engineHealthy(url string) error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(strings.TrimRight(url, "/") + "/_cluster/health")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s/_cluster/health answered %s", url, resp.Status)
	}
	return nil
}

// Name returns a unique lower-case name with the given prefix, usable as a
// schema or index name.
func Name(prefix string) string {
	b := make([]byte, 5)
	rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// DB is one test's database: its own schema, migrated, dropped at cleanup.
type DB struct {
	URL    string // the server URL
	Schema string // this test's schema
	Pool   *pgxpool.Pool
}

// NewDB creates a fresh schema with every migration applied
// (migrations.CreateFresh: the same statements and version rows as
// `searchsync migrate up`, in one transaction) and returns a pool whose
// search_path is that schema. The schema is dropped at cleanup.
func NewDB(t testing.TB) *DB {
	t.Helper()
	url := DatabaseURL(t)
	schema := Name("t")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrations.CreateFresh(ctx, sqlDB(t, url), schema); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	pool := Pool(t, url, schema)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Logf("testenv: drop schema %s: %v", schema, err)
		}
	})
	return &DB{URL: url, Schema: schema, Pool: pool}
}

var (
	sqlOnce sync.Once
	sqlPool *sql.DB
	sqlErr  error
)

// sqlDB is one database/sql handle on the server for the whole test
// process, which the schemas are created through.
func sqlDB(t testing.TB, url string) *sql.DB {
	t.Helper()
	sqlOnce.Do(func() {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			sqlErr = err
			return
		}
		sqlPool = stdlib.OpenDB(*cfg)
		sqlPool.SetMaxIdleConns(4)
	})
	if sqlErr != nil {
		t.Fatalf("testenv: %v", sqlErr)
	}
	return sqlPool
}

// Pool opens a pool on url with search_path set to schema, closed at cleanup.
func Pool(t testing.TB, url, schema string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Eventually polls cond every tick until it returns true or the deadline
// passes, then fails the test with msg.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := 10 * time.Millisecond
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: not within %s: "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(tick)
		if tick < 200*time.Millisecond {
			tick *= 2
		}
	}
}

// FreeAddr returns a 127.0.0.1 address nothing listens on, for a process the
// test starts. The port is picked at random below the kernel's ephemeral
// range (32768 and up on Linux): a port taken from that range and released
// again may be handed out as the local port of an outgoing connection (the
// tests make thousands) before the process listens on it.
func FreeAddr(t testing.TB) string {
	t.Helper()
	for range 50 {
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+mrand.IntN(12000))
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			return addr
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: no free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// LogBuffer is a log destination that a process or logger writes to while
// the test reads it.
type LogBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is what was written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
