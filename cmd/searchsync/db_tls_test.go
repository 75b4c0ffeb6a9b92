package main

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/testenv"
)

// tlsURL is the test database's URL with its query replaced by q.
func tlsURL(t *testing.T, user *url.Userinfo, q url.Values) string {
	t.Helper()
	u, err := url.Parse(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	if user != nil {
		u.User = user
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func TestPostgresTLSVerifyFull(t *testing.T) {
	t.Parallel()
	pt := testenv.PostgresTLSFiles(t)
	ctx := context.Background()
	dbURL := tlsURL(t, nil, url.Values{"sslmode": {"verify-full"}, "sslrootcert": {pt.CA}})
	pool, err := openPool(ctx, config.Database{URL: dbURL, Schema: "public", MaxConns: 2}, 10*time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var ssl bool
	if err := pool.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
		t.Fatalf("connection is not TLS: ssl=%v err=%v", ssl, err)
	}
}

func TestPostgresTLSClientCertificate(t *testing.T) {
	t.Parallel()
	pt := testenv.PostgresTLSFiles(t)
	ctx := context.Background()
	dbURL := tlsURL(t, url.User(pt.CertUser), url.Values{"sslmode": {"verify-full"}, "sslrootcert": {pt.CA},
		"sslcert": {pt.ClientCert}, "sslkey": {pt.ClientKey}})
	pool, err := openPool(ctx, config.Database{URL: dbURL, Schema: "public", MaxConns: 2}, 10*time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var user string
	if err := pool.QueryRow(ctx, "SELECT current_user").Scan(&user); err != nil || user != pt.CertUser {
		t.Fatalf("current_user = %q, %v; want %q (admitted by its certificate)", user, err, pt.CertUser)
	}

	// Without the certificate the same role is refused: hostssl … cert
	// takes no password.
	noCert := tlsURL(t, url.UserPassword(pt.CertUser, "guess"), url.Values{"sslmode": {"verify-full"}, "sslrootcert": {pt.CA}})
	if p, err := openPool(ctx, config.Database{URL: noCert, Schema: "public", MaxConns: 2}, 10*time.Second, slog.New(slog.DiscardHandler)); err == nil {
		p.Close()
		t.Fatal("a cert-only role connected without a certificate")
	}
}

func TestPostgresTLSWrongCA(t *testing.T) {
	t.Parallel()
	testenv.PostgresTLSFiles(t)
	other := testenv.NewCA(t, "not the server's CA")
	const password = "searchsync" // the test role's password, which no error may print
	dbURL := tlsURL(t, url.UserPassword("searchsync", password), url.Values{"sslmode": {"verify-full"}, "sslrootcert": {other.CertFile}})
	_, err := openPool(context.Background(), config.Database{URL: dbURL, Schema: "public", MaxConns: 2}, 10*time.Second, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("connected although the server's certificate is not signed by sslrootcert")
	}
	msg := err.Error()
	t.Log(msg)
	for _, want := range []string{"sslrootcert", other.CertFile, "database.url"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not name %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, ":"+password+"@") || strings.Contains(msg, "password="+password) {
		t.Errorf("error prints the password: %s", msg)
	}

	// A CA file that does not exist names the setting too.
	missing := tlsURL(t, url.UserPassword("searchsync", password), url.Values{"sslmode": {"verify-full"}, "sslrootcert": {"/nonexistent/ca.crt"}})
	_, err = openPool(context.Background(), config.Database{URL: missing, Schema: "public", MaxConns: 2}, 10*time.Second, slog.New(slog.DiscardHandler))
	t.Log(err)
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/ca.crt") || strings.Contains(err.Error(), ":"+password+"@") {
		t.Errorf("missing sslrootcert: %v", err)
	}
}
