package testenv_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"net/http"
	"os"
	"testing"

	"github.com/searchsync/searchsync/internal/testenv"
)

// The auth proxy is a real server that refuses every credential but its
// own: no header, a wrong token, a wrong key, basic auth, the key's parts
// unencoded; and lets the API key and the bearer token through to
// Elasticsearch.
func TestAuthProxyRefusesWrongCredentials(t *testing.T) {
	t.Parallel()
	p := testenv.AuthProxy(t)
	for auth, want := range map[string]int{
		"":                                     http.StatusUnauthorized,
		"Bearer " + p.Bearer + "x":             http.StatusUnauthorized,
		"ApiKey " + p.APIKey[:len(p.APIKey)-2]: http.StatusUnauthorized,
		"ApiKey " + p.APIKeyID + ":" + p.APIKeySecret: http.StatusUnauthorized,
		"Bearer " + p.APIKey:                          http.StatusUnauthorized,
		"ApiKey " + p.Bearer:                          http.StatusUnauthorized,
		"Basic " + p.APIKey:                           http.StatusUnauthorized,
		"ApiKey " + p.APIKey:                          http.StatusOK,
		"Bearer " + p.Bearer:                          http.StatusOK,
	} {
		req, err := http.NewRequest(http.MethodGet, p.URL+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("credential #%d: %s, want %d", len(auth), resp.Status, want)
		}
		if got := resp.Header.Get("X-Elastic-Product"); got != "Elasticsearch" {
			t.Errorf("X-Elastic-Product %q on a %d answer", got, resp.StatusCode)
		}
	}
}

// The CA fingerprint is what Elasticsearch 8 prints: SHA-256 of the CA
// certificate's DER, lower-case hex without colons.
func TestSecureCAFingerprint(t *testing.T) {
	t.Parallel()
	s := testenv.Secure(t)
	data, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: no PEM block", s.CAFile)
	}
	sum := sha256.Sum256(b.Bytes)
	if got := hex.EncodeToString(sum[:]); got != s.CAFingerprint {
		t.Fatalf("fingerprint %s, want %s", s.CAFingerprint, got)
	}
}
