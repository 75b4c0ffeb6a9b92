package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/searchsync/searchsync/dashboard"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/secret"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/internal/tlsconf"
)

// secureVars is testenv.Secure as the SEARCHSYNC_SECURE_* names.
func secureVars(t *testing.T) map[string]string {
	t.Helper()
	s := testenv.Secure(t)
	return map[string]string{"SEARCHSYNC_SECURE_URL": s.URL, "SEARCHSYNC_SECURE_CA": s.CAFile,
		"SEARCHSYNC_SECURE_ADMIN_USER": s.AdminUser, "SEARCHSYNC_SECURE_ADMIN_PASSWORD": s.AdminPassword,
		"SEARCHSYNC_SECURE_WRITER_USER": s.WriterUser, "SEARCHSYNC_SECURE_WRITER_PASSWORD": s.WriterPassword,
		"SEARCHSYNC_SECURE_READONLY_USER": s.ReadOnlyUser, "SEARCHSYNC_SECURE_READONLY_PASSWORD": s.ReadOnlyPassword}
}

// TestEngineSecretsNeverShow runs the relay against the secured node with
// the writer's password written literally in the configuration and
// insecure_skip_verify on, then collects everything a person or a scraper
// can see — the log, `status` and `status --json`, the dashboard's page,
// script and JSON, /metrics — and the start-up errors of a wrong password
// (from env:) and of the read-only user, and finds no secret in any of it.
// On the way it checks what they must say: the auth method, the
// skip-verify warning, the setting or privilege at fault.
func TestEngineSecretsNeverShow(t *testing.T) {
	t.Parallel()
	v := secureVars(t)
	db := testenv.NewDB(t)
	addr := testenv.FreeAddr(t)
	alias := testenv.Name("conn")
	defs, projections := customerIndex(t, alias)
	admin, err := indexer.New(indexer.Config{URLs: []string{v["SEARCHSYNC_SECURE_URL"]}, TLS: tlsconf.Config{CAFile: v["SEARCHSYNC_SECURE_CA"]},
		Username: v["SEARCHSYNC_SECURE_ADMIN_USER"], Password: secret.Ref(v["SEARCHSYNC_SECURE_ADMIN_PASSWORD"])}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range []string{"_v1", "_v2"} {
			admin.DeleteIndex(context.Background(), alias+n)
		}
		indexer.Close(admin)
	})
	const wrongPassword = "Wr0ng-Pa55word-never-shown"
	secrets := []string{v["SEARCHSYNC_SECURE_WRITER_PASSWORD"], v["SEARCHSYNC_SECURE_READONLY_PASSWORD"], v["SEARCHSYNC_SECURE_ADMIN_PASSWORD"], wrongPassword}
	conf := func(user, password string, tls string) string {
		return writeConfig(t, fmt.Sprintf(`
database:
  url: %q
  schema: %s
http:
  listen: %q
relay:
  poll_interval: 200ms
engine:
  urls: [%q]
  username: %s
  password: %q
  tls:
%s
indexes:
  definitions: %q
  projections: [%q]
consumers:
  - name: search
    type: search
    search:
      indexes: [%s]
routes:
  - consumer: search
`, db.URL, db.Schema, addr, v["SEARCHSYNC_SECURE_URL"], user, password, tls, defs, projections, alias))
	}
	env := []string{"DATABASE_URL=", "SEARCHSYNC_ENGINE_URL=", "SEARCHSYNC_LOG_LEVEL=info", "SEARCHSYNC_LOG_FORMAT=json",
		"SEARCHSYNC_ENGINE_USERNAME=", "SEARCHSYNC_ENGINE_PASSWORD=", "CONN_TEST_WRONG_PASSWORD=" + wrongPassword}
	var seen strings.Builder

	// The relay, as the least-privilege writer, with skip-verify.
	cfg := conf(v["SEARCHSYNC_SECURE_WRITER_USER"], v["SEARCHSYNC_SECURE_WRITER_PASSWORD"], "    insecure_skip_verify: true")
	logFile := filepath.Join(t.TempDir(), "relay.log")
	stop := startRelayEnv(t, cfg, addr, env, logFile)
	get := func(path string) string {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		seen.Write(b)
		return string(b)
	}
	get("/")
	get("/app.js")
	get("/metrics")
	var st dashboard.State
	if err := json.Unmarshal([]byte(get("/api/state")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Engine == nil || st.Engine.Auth != "basic (user "+v["SEARCHSYNC_SECURE_WRITER_USER"]+", password literal in the configuration)" ||
		!st.Engine.InsecureSkipVerify || !strings.Contains(st.Engine.Warning, "insecure_skip_verify") || st.Engine.TLS != "NOT VERIFIED (insecure_skip_verify)" {
		t.Errorf("dashboard engine: %+v", st.Engine)
	}
	out, stderr, code := runCLI(t, env, "-c", cfg, "status")
	seen.WriteString(out + stderr)
	if code != 0 || !strings.Contains(out, "auth basic (user "+v["SEARCHSYNC_SECURE_WRITER_USER"]) || !strings.Contains(out, "WARNING: engine.tls.insecure_skip_verify is on") {
		t.Errorf("status (exit %d):\n%s\n%s", code, out, stderr)
	}
	out, stderr, code = runCLI(t, env, "-c", cfg, "status", "--json")
	seen.WriteString(out + stderr)
	var doc struct {
		Engine *dashboard.Engine `json:"engine"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || doc.Engine == nil || !doc.Engine.InsecureSkipVerify || doc.Engine.Auth == "" {
		t.Errorf("status --json (exit %d, %v): %s", code, err, out)
	}
	stop()
	relayLog, _ := os.ReadFile(logFile)
	seen.Write(relayLog)
	if !strings.Contains(string(relayLog), `"msg":"engine.tls.insecure_skip_verify is on`) || !strings.Contains(string(relayLog), `"level":"WARN"`) {
		t.Errorf("no skip-verify warning in the log:\n%s", relayLog)
	}

	// A wrong password (from env:): start-up stops at once, naming the setting.
	cfg = conf(v["SEARCHSYNC_SECURE_WRITER_USER"], "env:CONN_TEST_WRONG_PASSWORD", "    ca_file: "+v["SEARCHSYNC_SECURE_CA"])
	start := time.Now()
	out, stderr, code = runCLI(t, env, "-c", cfg, "run")
	seen.WriteString(out + stderr)
	if code == 0 || !strings.Contains(stderr, "check engine.username and engine.password") || time.Since(start) > time.Minute {
		t.Errorf("wrong password: exit %d after %s:\n%s", code, time.Since(start), stderr)
	}
	// The read-only user: start-up stops at once, naming the privilege.
	cfg = conf(v["SEARCHSYNC_SECURE_READONLY_USER"], v["SEARCHSYNC_SECURE_READONLY_PASSWORD"], "    ca_file: "+v["SEARCHSYNC_SECURE_CA"])
	out, stderr, code = runCLI(t, env, "-c", cfg, "run")
	seen.WriteString(out + stderr)
	if code == 0 || !strings.Contains(stderr, "user "+v["SEARCHSYNC_SECURE_READONLY_USER"]+" lacks the privilege") {
		t.Errorf("read-only user: exit %d:\n%s", code, stderr)
	}
	// `status` as the read-only user, which may not read index stats: the
	// index's documents and health, and a note that commit → searchable is
	// not measured with such a user.
	out, stderr, code = runCLI(t, env, "-c", cfg, "status")
	seen.WriteString(out + stderr)
	if code != 0 || !strings.Contains(out, "INDEX") ||
		!strings.Contains(out, "note: commit → searchable latency is not measured: the engine user may not read the stats of "+alias) {
		t.Errorf("status as the read-only user (exit %d):\n%s\n%s", code, out, stderr)
	}
	// A wrong CA: start-up stops at once, naming engine.tls.ca_file.
	cfg = conf(v["SEARCHSYNC_SECURE_WRITER_USER"], v["SEARCHSYNC_SECURE_WRITER_PASSWORD"], "    ca_file: "+writeOtherCA(t))
	out, stderr, code = runCLI(t, env, "-c", cfg, "run")
	seen.WriteString(out + stderr)
	if code == 0 || !strings.Contains(stderr, "not signed by a CA in engine.tls.ca_file") {
		t.Errorf("wrong CA: exit %d:\n%s", code, stderr)
	}

	for _, s := range secrets {
		if strings.Contains(seen.String(), s) {
			i := strings.Index(seen.String(), s)
			t.Errorf("a secret shows: …%s…", strings.ReplaceAll(seen.String()[max(0, i-80):i], s, "<SECRET>"))
		}
	}
	if seen.Len() < 1000 {
		t.Fatalf("collected only %d bytes: the test saw nothing", seen.Len())
	}
}

// startRelayEnv starts `searchsync run` with env, logging to logFile, and
// returns once /readyz answers; the returned stop (also run at cleanup)
// sends SIGTERM and waits.
func startRelayEnv(t *testing.T, cfgFile, addr string, env []string, logFile string) func() {
	t.Helper()
	stop, _ := startProcess(t, cfgFile, env, logFile)
	testenv.Eventually(t, 60*time.Second, func() bool { return ready(addr) }, "relay never became ready")
	return stop
}

// writeOtherCA writes a CA certificate that signed nothing the node has.
func writeOtherCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "another CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
