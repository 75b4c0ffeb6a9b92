package indexer_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/secret"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/internal/tlsconf"
)

// secureEnv is testenv.Secure as the SEARCHSYNC_SECURE_* names.
func secureEnv(t *testing.T) map[string]string {
	s := testenv.Secure(t)
	return map[string]string{"SEARCHSYNC_SECURE_URL": s.URL, "SEARCHSYNC_SECURE_CA": s.CAFile, "SEARCHSYNC_SECURE_CA_FINGERPRINT": s.CAFingerprint,
		"SEARCHSYNC_SECURE_ADMIN_USER": s.AdminUser, "SEARCHSYNC_SECURE_ADMIN_PASSWORD": s.AdminPassword,
		"SEARCHSYNC_SECURE_WRITER_USER": s.WriterUser, "SEARCHSYNC_SECURE_WRITER_PASSWORD": s.WriterPassword,
		"SEARCHSYNC_SECURE_READONLY_USER": s.ReadOnlyUser, "SEARCHSYNC_SECURE_READONLY_PASSWORD": s.ReadOnlyPassword,
		"SEARCHSYNC_SECURE_CLIENT_CERT": s.ClientCert, "SEARCHSYNC_SECURE_CLIENT_KEY": s.ClientKey}
}

func engineOf(t *testing.T, cfg indexer.Config) indexer.Engine {
	t.Helper()
	e, err := indexer.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { indexer.Close(e) })
	return e
}

// aliasWithIndex creates index <alias>_v1 with alias <alias> as eng's user.
func aliasWithIndex(t *testing.T, eng indexer.Engine, prefix string) string {
	t.Helper()
	alias := testenv.Name(prefix)
	body := `{"settings":{"number_of_shards":1,"number_of_replicas":0},"aliases":{"` + alias + `":{}}}`
	if err := eng.CreateIndex(context.Background(), alias+"_v1", json.RawMessage(body)); err != nil {
		t.Fatalf("create %s_v1: %v", alias, err)
	}
	t.Cleanup(func() { eng.DeleteIndex(context.Background(), alias+"_v1") })
	return alias
}

// TestSecureWriter: the least-privilege writer, over TLS verified with the
// CA file, creates an index and alias, writes, reads, and passes the access
// check; the engine names it.
func TestSecureWriter(t *testing.T) {
	t.Parallel()
	env := secureEnv(t)
	ctx := context.Background()
	eng := engineOf(t, indexer.Config{URLs: []string{env["SEARCHSYNC_SECURE_URL"]}, TLS: tlsconf.Config{CAFile: env["SEARCHSYNC_SECURE_CA"]},
		Username: env["SEARCHSYNC_SECURE_WRITER_USER"], Password: secret.Ref(env["SEARCHSYNC_SECURE_WRITER_PASSWORD"])})
	alias := aliasWithIndex(t, eng, "secure_writer")
	res, err := eng.Bulk(ctx, []indexer.BulkOp{{Type: indexer.OpIndex, Index: alias, ID: "1", Version: 3, RequireAlias: true, Doc: json.RawMessage(`{"n":1}`)}})
	if err != nil || res[0].Status != http.StatusCreated {
		t.Fatalf("write: %v %+v", err, res)
	}
	docs, err := eng.MGet(ctx, alias, []string{"1"})
	if err != nil || docs["1"].Version != 3 {
		t.Fatalf("read: %v %+v", err, docs)
	}
	if err := answered(ctx, func(ctx context.Context) error { return indexer.CheckAccess(ctx, eng, alias) }); err != nil {
		t.Fatalf("access check: %v", err)
	}
	// The access check wrote nothing.
	if err := eng.Refresh(ctx, alias); err != nil {
		t.Fatal(err)
	}
	if n, err := eng.Count(ctx, alias, nil); err != nil || n != 1 {
		t.Fatalf("after the access check: %d docs, %v", n, err)
	}
	if who := indexer.WhoAmI(ctx, eng); who != env["SEARCHSYNC_SECURE_WRITER_USER"] {
		t.Errorf("WhoAmI = %q", who)
	}
}

// TestSecureReadOnly: the read-only user fails the access check with an
// error naming the privilege, the alias and the user.
func TestSecureReadOnly(t *testing.T) {
	t.Parallel()
	env := secureEnv(t)
	ctx := context.Background()
	tc := tlsconf.Config{CAFile: env["SEARCHSYNC_SECURE_CA"]}
	admin := engineOf(t, indexer.Config{URLs: []string{env["SEARCHSYNC_SECURE_URL"]}, TLS: tc,
		Username: env["SEARCHSYNC_SECURE_ADMIN_USER"], Password: secret.Ref(env["SEARCHSYNC_SECURE_ADMIN_PASSWORD"])})
	alias := aliasWithIndex(t, admin, "secure_ro")
	reader := engineOf(t, indexer.Config{URLs: []string{env["SEARCHSYNC_SECURE_URL"]}, TLS: tc,
		Username: env["SEARCHSYNC_SECURE_READONLY_USER"], Password: secret.Ref(env["SEARCHSYNC_SECURE_READONLY_PASSWORD"])})
	err := answered(ctx, func(ctx context.Context) error { return indexer.CheckAccess(ctx, reader, alias) })
	var ae *indexer.AccessError
	if !errors.As(err, &ae) {
		t.Fatalf("read-only user: %v (%T), want an *indexer.AccessError", err, err)
	}
	msg := err.Error()
	for _, want := range []string{"engine user " + env["SEARCHSYNC_SECURE_READONLY_USER"] + " may not write " + alias, "grant the privilege write", "indices:data/write/"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if indexer.IsTemporary(err) {
		t.Error("a missing privilege must not be retried")
	}
	// Creating an index: 403 with the privilege named.
	err = reader.CreateIndex(ctx, testenv.Name("secure_ro_create"), nil)
	if ee, ok := indexer.AsEngineError(err); !ok || ee.Status != http.StatusForbidden || !strings.Contains(ee.Error(), "lacks the privilege create_index") {
		t.Fatalf("create index as the read-only user: %v", err)
	}
}

// TestSecureTLS: fingerprint, client certificate, skip-verify, and the
// failures that name their setting: wrong CA, wrong fingerprint, wrong
// password.
func TestSecureTLS(t *testing.T) {
	t.Parallel()
	env := secureEnv(t)
	ctx := context.Background()
	url := []string{env["SEARCHSYNC_SECURE_URL"]}
	writer, pw := env["SEARCHSYNC_SECURE_WRITER_USER"], secret.Ref(env["SEARCHSYNC_SECURE_WRITER_PASSWORD"])

	// CA fingerprint, as Elasticsearch 8 prints it (plain hex) and with
	// colons. It pins a certificate the server presents: Elasticsearch 8
	// presents its CA; a node that presents only its own certificate gets
	// an error saying so, and its own fingerprint works.
	chain := presented(t, url[0])
	if len(chain) < 2 {
		t.Errorf("the secured node presents %d certificate(s); scripts/opensearch-secure.sh has it present its CA too, as Elasticsearch 8 does", len(chain))
	}
	caFP := env["SEARCHSYNC_SECURE_CA_FINGERPRINT"]
	leafFP := tlsconf.Fingerprint(chain[0])
	for _, f := range []string{caFP, colonsUpper(caFP), leafFP, strings.ToLower(strings.ReplaceAll(leafFP, ":", ""))} {
		err := answered(ctx, engineOf(t, indexer.Config{URLs: url, TLS: tlsconf.Config{CAFingerprint: f}, Username: writer, Password: pw}).Ping)
		switch {
		case len(chain) == 1 && (f == caFP || f == colonsUpper(caFP)):
			if err == nil || !strings.Contains(err.Error(), "presents only its own certificate") || indexer.IsTemporary(err) {
				t.Errorf("CA fingerprint %s of a node that does not present its CA: %v", f, err)
			}
		case err != nil:
			t.Errorf("ca_fingerprint %s: %v", f, err)
		}
	}
	// Client certificate, no password: the node maps its CN to the writer.
	cert := engineOf(t, indexer.Config{URLs: url, TLS: tlsconf.Config{CAFile: env["SEARCHSYNC_SECURE_CA"],
		CertFile: env["SEARCHSYNC_SECURE_CLIENT_CERT"], KeyFile: env["SEARCHSYNC_SECURE_CLIENT_KEY"]}})
	alias := aliasWithIndex(t, cert, "secure_cert")
	if err := answered(ctx, func(ctx context.Context) error { return indexer.CheckAccess(ctx, cert, alias) }); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	// A client certificate of a CA the node does not trust for clients:
	// refused (401, an answer without an error object) with a hint at the
	// issuer, not only at the role mapping.
	clientCA := testenv.NewCA(t, "not-the-node-ca")
	otherCert, otherKey := clientCA.Client(t, "searchsync-client")
	untrusted := engineOf(t, indexer.Config{URLs: url, TLS: tlsconf.Config{CAFile: env["SEARCHSYNC_SECURE_CA"], CertFile: otherCert, KeyFile: otherKey}})
	err := answered(ctx, untrusted.Ping)
	if err == nil || !strings.Contains(err.Error(), "its issuer must be a CA the engine trusts") || strings.Contains(err.Error(), "401 :") {
		t.Errorf("client certificate of an untrusted CA: %v", err)
	}
	// Skip-verify works, and says so.
	skip := indexer.Config{URLs: url, TLS: tlsconf.Config{InsecureSkipVerify: true}, Username: writer, Password: pw}
	if err := answered(ctx, engineOf(t, skip).Ping); err != nil {
		t.Errorf("insecure_skip_verify: %v", err)
	}
	if w := indexer.TLSWarning(skip); !strings.Contains(w, "insecure_skip_verify") {
		t.Errorf("no warning for insecure_skip_verify: %q", w)
	}

	// A CA that did not sign the node's certificate.
	otherCA := filepath.Join(t.TempDir(), "other-ca.pem")
	writeSelfSignedCA(t, otherCA)
	for name, tc := range map[string]struct {
		cfg  indexer.Config
		want string
	}{
		"wrong ca_file":       {indexer.Config{URLs: url, TLS: tlsconf.Config{CAFile: otherCA}, Username: writer, Password: pw}, "not signed by a CA in engine.tls.ca_file"},
		"system CAs":          {indexer.Config{URLs: url, Username: writer, Password: pw}, "set engine.tls.ca_file or engine.tls.ca_fingerprint"},
		"wrong fingerprint":   {indexer.Config{URLs: url, TLS: tlsconf.Config{CAFingerprint: strings.Repeat("ab", 32)}, Username: writer, Password: pw}, "engine.tls.ca_fingerprint does not match"},
		"wrong server_name":   {indexer.Config{URLs: url, TLS: tlsconf.Config{CAFile: env["SEARCHSYNC_SECURE_CA"], ServerName: "elsewhere.invalid"}, Username: writer, Password: pw}, "engine.tls.server_name"},
		"wrong password":      {indexer.Config{URLs: url, TLS: tlsconf.Config{CAFile: env["SEARCHSYNC_SECURE_CA"]}, Username: writer, Password: "not-the-password"}, "check engine.username and engine.password"},
		"no credentials":      {indexer.Config{URLs: url, TLS: tlsconf.Config{CAFile: env["SEARCHSYNC_SECURE_CA"]}}, "the engine wants credentials"},
		"http on a TLS port":  {indexer.Config{URLs: []string{strings.Replace(url[0], "https://", "http://", 1)}, Username: writer, Password: pw}, "answers with TLS, not plain HTTP: use https://"},
		"https to plain http": {indexer.Config{URLs: []string{strings.Replace(testenv.EngineURL(t), "http://", "https://", 1)}}, "does not speak TLS on this port"},
	} {
		err := answered(ctx, engineOf(t, tc.cfg).Ping)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
		if indexer.IsTemporary(err) {
			t.Errorf("%s: %v is treated as temporary (start-up would wait for ever)", name, err)
		}
	}
}

// TestAuthProxy: API key (encoded and id:key) and bearer token against the
// nginx in front of Elasticsearch 7.17 that checks them; a wrong one is
// refused with a message naming the setting.
func TestAuthProxy(t *testing.T) {
	t.Parallel()
	p := testenv.AuthProxy(t)
	env := map[string]string{"SEARCHSYNC_AUTH_PROXY_URL": p.URL, "SEARCHSYNC_AUTH_PROXY_API_KEY": p.APIKey,
		"SEARCHSYNC_AUTH_PROXY_API_KEY_ID": p.APIKeyID, "SEARCHSYNC_AUTH_PROXY_API_KEY_SECRET": p.APIKeySecret}
	if os.Getenv("SEARCHSYNC_AUTH_PROXY_BEARER") != p.Bearer {
		t.Fatal("SEARCHSYNC_AUTH_PROXY_BEARER is not the proxy's bearer token: load `eval \"$(scripts/services.sh env)\"`")
	}
	ctx := context.Background()
	url := []string{env["SEARCHSYNC_AUTH_PROXY_URL"]}
	keyFile := filepath.Join(t.TempDir(), "api-key")
	if err := os.WriteFile(keyFile, []byte(env["SEARCHSYNC_AUTH_PROXY_API_KEY"]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := map[string]indexer.Config{
		"api_key encoded from file": {APIKey: secret.Ref("file:" + keyFile)},
		"api_key id:key":            {APIKey: secret.Ref(env["SEARCHSYNC_AUTH_PROXY_API_KEY_ID"] + ":" + env["SEARCHSYNC_AUTH_PROXY_API_KEY_SECRET"])},
		"bearer_token from env":     {BearerToken: "env:SEARCHSYNC_AUTH_PROXY_BEARER"},
	}
	for name, cfg := range good {
		cfg.Kind, cfg.URLs = "elasticsearch", url
		eng := engineOf(t, cfg)
		alias := aliasWithIndex(t, eng, "authproxy")
		if err := answered(ctx, func(ctx context.Context) error { return indexer.CheckAccess(ctx, eng, alias) }); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := map[string]struct {
		cfg  indexer.Config
		want string
	}{
		"wrong api_key":      {indexer.Config{APIKey: secret.Ref(env["SEARCHSYNC_AUTH_PROXY_API_KEY_ID"] + ":wrong")}, "check engine.api_key"},
		"wrong bearer_token": {indexer.Config{BearerToken: "not-the-token"}, "check engine.bearer_token"},
		"none":               {indexer.Config{}, "the engine wants credentials"},
	}
	for name, tc := range bad {
		tc.cfg.Kind, tc.cfg.URLs = "elasticsearch", url
		err := answered(ctx, engineOf(t, tc.cfg).Ping)
		ee, ok := indexer.AsEngineError(err)
		if !ok || ee.Status != http.StatusUnauthorized || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want 401 and %q", name, err, tc.want)
		}
	}
}

// TestElasticsearchAccessCheck: the access check's probe on a real
// Elasticsearch: document_missing_exception, nothing written.
func TestElasticsearchAccessCheck(t *testing.T) {
	t.Parallel()
	eng := engineOf(t, indexer.Config{Kind: "elasticsearch", URLs: []string{testenv.ElasticsearchURL(t)}})
	alias := aliasWithIndex(t, eng, "es_access")
	ctx := context.Background()
	if err := answered(ctx, func(ctx context.Context) error { return indexer.CheckAccess(ctx, eng, alias) }); err != nil {
		t.Fatal(err)
	}
	if err := eng.Refresh(ctx, alias); err != nil {
		t.Fatal(err)
	}
	if n, err := eng.Count(ctx, alias, nil); err != nil || n != 0 {
		t.Fatalf("the probe wrote: %d docs, %v", n, err)
	}
}

func writeSelfSignedCA(t *testing.T, file string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the node's CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// presented returns the certificates the server at url presents.
func presented(t *testing.T, url string) []*x509.Certificate {
	t.Helper()
	c, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates
}

func colonsUpper(h string) string {
	var parts []string
	for i := 0; i+2 <= len(h); i += 2 {
		parts = append(parts, strings.ToUpper(h[i:i+2]))
	}
	return strings.Join(parts, ":")
}
