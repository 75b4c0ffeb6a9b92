package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/config"
)

// connectTimeout bounds how long commands try to reach PostgreSQL.
const connectTimeout = 10 * time.Second

// openPool connects to the configured database with search_path set to the
// outbox schema, waiting up to timeout for a server that does not answer
// yet (waitForDatabase), and fails with the host it tried.
func openPool(ctx context.Context, db config.Database, timeout time.Duration, logger *slog.Logger) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		return nil, fmt.Errorf("database.url: %w", err)
	}
	pc.ConnConfig.RuntimeParams["search_path"] = db.Schema
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		pc.ConnConfig.RuntimeParams["application_name"] = "searchsync"
	}
	pc.MaxConns = db.MaxConns
	where := fmt.Sprintf("%s:%d (database %q, user %q)", pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database, pc.ConnConfig.User)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to PostgreSQL at %s: %w", where, err)
	}
	if err := waitForDatabase(ctx, pool, db.URL, where, timeout, logger); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// waitForDatabase pings PostgreSQL until it answers, for at most timeout
// (a restart, a failover, a database still starting up), with backoff and
// one log line while it waits. A refusal that waiting cannot cure (wrong
// password, unknown database or role, a TLS mismatch) ends it at once.
func waitForDatabase(ctx context.Context, pool *pgxpool.Pool, dbURL, where string, timeout time.Duration, logger *slog.Logger) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(2*time.Second), backoff.WithMaxElapsedTime(0))
	waiting := false
	for {
		pctx, pcancel := context.WithTimeout(wctx, max(time.Second, timeout/4))
		err := pool.Ping(pctx)
		pcancel()
		if err == nil {
			if waiting {
				logger.Info("PostgreSQL answers", "at", where)
			}
			return nil
		}
		hint := tlsHint(dbURL, err)
		if hint != "" || permanentDBError(err) || wctx.Err() != nil {
			if wctx.Err() != nil && ctx.Err() == nil {
				hint += fmt.Sprintf(" (tried for %s: --connect-timeout)", timeout)
			}
			return fmt.Errorf("cannot reach PostgreSQL at %s (database.url or DATABASE_URL)%s: %w", where, hint, err)
		}
		d := bo.NextBackOff()
		if !waiting {
			logger.Warn("waiting for PostgreSQL", "at", where, "error", err, "for_at_most", timeout)
			waiting = true
		}
		select {
		case <-wctx.Done():
		case <-time.After(d):
		}
	}
}

// permanentDBError reports an error a wait does not cure: the server
// answered and refused (authentication, an unknown database or role, a
// bad parameter), as opposed to one that is not up, starting up or
// shutting down (class 57), or not reachable.
func permanentDBError(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code[:2] {
	case "28", "3D", "42", "0A":
		return true
	}
	return false
}

// tlsHint names the setting behind a TLS failure: the server's certificate
// did not verify against sslrootcert, or the server refused ours.
func tlsHint(dbURL string, err error) string {
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	switch {
	case errors.As(err, &ua), errors.As(err, &cv) && errors.As(cv.Err, &ua):
		root := cmp.Or(connParam(dbURL, "sslrootcert"), os.Getenv("PGSSLROOTCERT"))
		if root == "" {
			return ": the server's certificate is not signed by a CA the system trusts; set sslrootcert in database.url to the CA file"
		}
		return fmt.Sprintf(": the server's certificate is not signed by the CA of sslrootcert=%s in database.url", root)
	case errors.As(err, &he):
		return ": the server's certificate does not name the host of database.url (sslmode=verify-full checks it)"
	case errors.As(err, &cv):
		return ": the server's certificate did not verify (sslmode, sslrootcert in database.url)"
	}
	var alert tls.AlertError
	if errors.As(err, &alert) || strings.Contains(err.Error(), "remote error: tls:") {
		return ": the server refused the TLS handshake (sslcert, sslkey in database.url)"
	}
	return ""
}

// connParam reads one parameter of a connection string, a URL or key=value
// pairs.
func connParam(conn, key string) string {
	if u, err := url.Parse(conn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		return u.Query().Get(key)
	}
	for _, f := range strings.Fields(conn) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return strings.Trim(v, "'")
		}
	}
	return ""
}

// connect loads the configuration and opens the database pool: what every
// command that reads or changes the outbox starts with. The caller closes
// the pool.
func (g *Globals) connect(ctx context.Context, opts ...config.Option) (*env, *pgxpool.Pool, error) {
	e, err := g.load(ctx, opts...)
	if err != nil {
		return nil, nil, err
	}
	pool, err := openPool(ctx, e.cfg.Database, connectTimeout, e.logger)
	if err != nil {
		return nil, nil, err
	}
	return e, pool, nil
}

// connectEngine is connect plus a client of the configured search engine;
// closeAll releases both.
func (g *Globals) connectEngine(ctx context.Context) (e *env, pool *pgxpool.Pool, eng indexer.Engine, closeAll func(), err error) {
	e, pool, err = g.connect(ctx, config.Secrets(config.SecretsEngine))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	eng, err = indexer.New(e.cfg.Engine, nil)
	if err != nil {
		pool.Close()
		return nil, nil, nil, nil, err
	}
	return e, pool, eng, func() { indexer.Close(eng); pool.Close() }, nil
}
