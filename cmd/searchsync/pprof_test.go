package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/searchsync/searchsync/dashboard"
	"github.com/searchsync/searchsync/internal/testenv"
)

// TestPprofBehindTheOperatorToken runs a relay with http.pprof on (and
// GOMEMLIMIT, which it says it honours): its
// heap profile is served to a request with the operator token, refused
// (401, and a WARN with the client's address, not what it sent) without it
// or with a wrong one; a relay without http.pprof serves no profile at all.
func TestPprofBehindTheOperatorToken(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	tokenFile := filepath.Join(t.TempDir(), "operator-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	get := func(addr, tok string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/debug/pprof/heap", nil)
		if tok != "" {
			req.Header.Set(dashboard.TokenHeader, tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}

	addr := testenv.FreeAddr(t)
	logFile := filepath.Join(t.TempDir(), "relay.log")
	cfg := writeConfig(t, fmt.Sprintf(`
database: {url: %q, schema: %s}
http: {listen: %q, operator_token: "file:%s", pprof: true}
consumers:
  - {name: hook, type: webhook, webhook: {url: "http://127.0.0.1:9/", secret: whsec_c2VjcmV0}}
routes:
  - {consumer: hook}
`, db.URL, db.Schema, addr, tokenFile))
	// GOMEMLIMIT is honoured and said at start-up.
	stop := startRelayEnv(t, cfg, addr, []string{"DATABASE_URL=", "SEARCHSYNC_LOG_FORMAT=json", "GOMEMLIMIT=200MiB"}, logFile)
	defer stop()

	code, body := get(addr, token)
	if code != http.StatusOK || !bytes.HasPrefix(body, []byte{0x1f, 0x8b}) {
		t.Fatalf("heap profile with the token: HTTP %d, %d bytes (want 200 and a gzipped profile)", code, len(body))
	}
	for _, tok := range []string{"", "wrong-" + token} {
		if code, body := get(addr, tok); code != http.StatusUnauthorized {
			t.Errorf("heap profile with token %q: HTTP %d %s, want 401", tok, code, body)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		b, _ := os.ReadFile(logFile)
		return strings.Count(string(b), "profile request refused") == 2
	}, "two refusals logged")
	logged, _ := os.ReadFile(logFile)
	if !strings.Contains(string(logged), `"msg":"memory limit","mib":200,"from":"GOMEMLIMIT"`) {
		t.Errorf("no memory limit line for GOMEMLIMIT=200MiB:\n%s", logged)
	}
	if strings.Contains(string(logged), token) {
		t.Errorf("the log holds the token:\n%s", logged)
	}
	if !strings.Contains(string(logged), `"client":"127.0.0.1:`) {
		t.Errorf("the refusals do not name the client:\n%s", logged)
	}

	// Off by default: nothing under /debug/pprof/, with or without the token.
	off := testenv.FreeAddr(t)
	cfgOff := writeConfig(t, fmt.Sprintf(`
database: {url: %q, schema: %s}
http: {listen: %q, operator_token: "file:%s"}
consumers:
  - {name: hook, type: webhook, webhook: {url: "http://127.0.0.1:9/", secret: whsec_c2VjcmV0}}
routes:
  - {consumer: hook}
`, db.URL, db.Schema, off, tokenFile))
	startRelay(t, cfgOff, off)
	if code, body := get(off, token); code == http.StatusOK && bytes.HasPrefix(body, []byte{0x1f, 0x8b}) {
		t.Errorf("a relay without http.pprof served a heap profile")
	}
}
