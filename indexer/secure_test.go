package indexer_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/secret"
	"github.com/searchsync/searchsync/internal/testenv"
)

// secureEngine is the OpenSearch adapter on the secured node, over TLS
// verified with the test CA, as user (empty: no password) presenting cert
// (nil: none).
func secureEngine(t *testing.T, user, password string, cert *tls.Certificate) indexer.Engine {
	t.Helper()
	sec := testenv.Secure(t)
	tc, err := sec.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	t.Cleanup(tr.CloseIdleConnections)
	e, err := indexer.New(indexer.Config{URLs: []string{sec.URL}, Username: user, Password: secret.Ref(password)}, &http.Client{Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { indexer.Close(e) })
	return e
}

// Every Engine call searchsync makes is allowed to the least-privilege
// writer of the secured node, by password and by client certificate (whose
// CN the node maps to the same role).
func TestSecuredOpenSearchWriter(t *testing.T) {
	t.Parallel()
	sec := testenv.Secure(t)
	cert, err := tls.LoadX509KeyPair(sec.ClientCert, sec.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, eng := range map[string]func(t *testing.T) indexer.Engine{
		"Password":          func(t *testing.T) indexer.Engine { return secureEngine(t, sec.WriterUser, sec.WriterPassword, nil) },
		"ClientCertificate": func(t *testing.T) indexer.Engine { return secureEngine(t, "", "", &cert) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			writerCalls(t, eng(t))
		})
	}
}

func writerCalls(t *testing.T, eng indexer.Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := answered(ctx, eng.Ping); err != nil {
		t.Fatalf("ping: %v", err)
	}
	idx, alias := testenv.Name("sec"), testenv.Name("seca")
	body := json.RawMessage(`{"settings":{"index":{"number_of_shards":1,"number_of_replicas":0}},"mappings":{"properties":{"name":{"type":"keyword"}}}}`)
	if err := eng.CreateIndex(ctx, idx, body); err != nil {
		t.Fatalf("create index: %v", err)
	}
	t.Cleanup(func() {
		if err := eng.DeleteIndex(context.Background(), idx); err != nil {
			t.Errorf("delete index: %v", err)
		}
	})
	if _, err := eng.WriteBlocks(ctx, idx); err != nil {
		t.Fatalf("write blocks: %v", err)
	}
	if info, err := eng.GetIndex(ctx, idx); err != nil || info == nil {
		t.Fatalf("get index: %v %v", info, err)
	}
	if err := eng.UpdateAliases(ctx, []indexer.AliasAction{{Add: true, Index: idx, Alias: alias}}); err != nil {
		t.Fatalf("update aliases: %v", err)
	}
	if got, err := eng.AliasTargets(ctx, alias); err != nil || len(got) != 1 || got[0] != idx {
		t.Fatalf("alias targets: %v %v", got, err)
	}
	res, err := eng.Bulk(ctx, []indexer.BulkOp{
		{Type: indexer.OpIndex, Index: alias, ID: "1", Version: 3, RequireAlias: true, Doc: json.RawMessage(`{"name":"a"}`)},
		{Type: indexer.OpIndex, Index: alias, ID: "2", Version: 1, RequireAlias: true, Doc: json.RawMessage(`{"name":"b"}`)},
		{Type: indexer.OpDelete, Index: alias, ID: "2", Version: 2},
	})
	if err != nil || len(res) != 3 || res[0].Status != 201 || res[1].Status != 201 || res[2].Status != 200 {
		t.Fatalf("bulk: %+v %v", res, err)
	}
	if docs, err := eng.MGet(ctx, alias, []string{"1", "2"}); err != nil || len(docs) != 1 || docs["1"].Version != 3 {
		t.Fatalf("mget: %v %v", docs, err)
	}
	if err := eng.Refresh(ctx, alias); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if sr, err := eng.Search(ctx, alias, json.RawMessage(`{"query":{"term":{"name":"a"}}}`)); err != nil || sr.Total != 1 {
		t.Fatalf("search: %+v %v", sr, err)
	}
	if n, err := eng.Count(ctx, alias, nil); err != nil || n != 1 {
		t.Fatalf("count: %d %v", n, err)
	}
}

// A missing privilege is an engine answer that says which: the read-only
// user may search but not create an index or write, and the error names the
// action (403 security_exception), not retried as temporary.
func TestSecuredOpenSearchMissingPrivilege(t *testing.T) {
	t.Parallel()
	sec := testenv.Secure(t)
	ro := secureEngine(t, sec.ReadOnlyUser, sec.ReadOnlyPassword, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := answered(ctx, ro.Ping); err != nil {
		t.Fatalf("ping as the read-only user: %v", err)
	}
	err := ro.CreateIndex(ctx, testenv.Name("secro"), json.RawMessage(`{}`))
	ee, ok := indexer.AsEngineError(err)
	if !ok || ee.Status != http.StatusForbidden || ee.Type != "security_exception" || !strings.Contains(ee.Reason, "indices:admin/create") {
		t.Fatalf("create index as the read-only user: %v; want 403 security_exception naming indices:admin/create", err)
	}
	if indexer.IsTemporary(err) {
		t.Errorf("%v is temporary; a missing privilege is not", err)
	}
	if strings.Contains(err.Error(), sec.ReadOnlyPassword) {
		t.Errorf("error %q shows the password", err)
	}
	// A wrong password is refused before any privilege is looked at.
	bad := secureEngine(t, sec.ReadOnlyUser, sec.ReadOnlyPassword+"x", nil)
	err = answered(ctx, bad.Ping)
	if ee, ok := indexer.AsEngineError(err); !ok || ee.Status != http.StatusUnauthorized {
		t.Fatalf("ping with a wrong password: %v; want a 401 engine error", err)
	}
}

// answered calls f until its error is something other than a timeout or a
// dropped connection (on a loaded machine the secured node's TLS handshake,
// or its answer, can take longer than the client waits, and the node may
// close a connection before it answers), for up to a minute, and returns the
// last error: what the engine answered, or the timeout if it never did.
func answered(ctx context.Context, f func(context.Context) error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := f(ctx)
		var ne net.Error
		timeout := errors.As(err, &ne) && ne.Timeout()
		// A connection the loaded node closed before it answered (EOF,
		// reset) says nothing about the TLS or auth settings either.
		dropped := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
		if (!timeout && !dropped) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
	}
}
