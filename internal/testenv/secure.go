package testenv

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// The production-cluster services that scripts/services.sh starts next to
// the plain OpenSearch node (see docs/test-services.md): a secured
// OpenSearch 2.19.4, a real Elasticsearch 7.17 and an nginx in front of the
// latter that demands an API key or a bearer token. Their settings come
// only from the SEARCHSYNC_SECURE_*, SEARCHSYNC_ES_URL and
// SEARCHSYNC_AUTH_PROXY_* variables that `scripts/services.sh env` prints;
// a test that needs one fails (never skips) when it is missing or unhealthy.

const servicesHint = "start them with `scripts/services.sh start` and load `eval \"$(scripts/services.sh env)\"`"

// SecureEngine is the secured OpenSearch node: TLS with a test CA, internal
// users and client-certificate authentication.
type SecureEngine struct {
	URL           string // https://127.0.0.1:9220
	CAFile        string // PEM of the CA that signed the node's certificate
	CAFingerprint string // SHA-256 of the CA certificate's DER, lower-case hex, no colons

	AdminUser, AdminPassword       string // all_access
	WriterUser, WriterPassword     string // only what searchsync needs
	ReadOnlyUser, ReadOnlyPassword string // read and search only

	// ClientCert and ClientKey are PEM files of a client certificate whose
	// CN the node maps to the writer's role.
	ClientCert, ClientKey string
}

// AuthProxyEndpoint is the nginx in front of the Elasticsearch node that
// lets through only Authorization: ApiKey <APIKey> or Bearer <Bearer>.
// (The function AuthProxy returns it; Go allows one name for only one of them.)
type AuthProxyEndpoint struct {
	URL          string
	APIKey       string // base64(APIKeyID:APIKeySecret), as Elasticsearch's API returns it "encoded"
	APIKeyID     string
	APIKeySecret string
	Bearer       string
}

var (
	secureService = service("no secured OpenSearch", servicesHint, findSecure)
	esService     = service("no Elasticsearch", servicesHint, findElasticsearch)
	proxyService  = service("no auth proxy", servicesHint, findAuthProxy)
)

// Secure returns the secured OpenSearch node, after checking that the admin
// user gets a healthy answer over TLS verified with CAFile.
func Secure(t testing.TB) SecureEngine {
	t.Helper()
	return secureService(t)
}

// ElasticsearchURL returns the URL of the Elasticsearch 7.17 node, after
// checking that it is healthy and answers as Elasticsearch (the header
// go-elasticsearch/v8 insists on).
func ElasticsearchURL(t testing.TB) string {
	t.Helper()
	return esService(t)
}

// AuthProxy returns the API-key/bearer proxy, after checking that it
// refuses a wrong credential and lets the API key through.
func AuthProxy(t testing.TB) AuthProxyEndpoint {
	t.Helper()
	return proxyService(t)
}

// envs reads the named variables; all must be set.
func envs(names ...string) ([]string, error) {
	vals := make([]string, len(names))
	var missing []string
	for i, n := range names {
		vals[i] = os.Getenv(n)
		if vals[i] == "" {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, permanent{fmt.Errorf("%s not set", strings.Join(missing, ", "))}
	}
	return vals, nil
}

func findSecure() (SecureEngine, error) {
	v, err := envs("SEARCHSYNC_SECURE_URL", "SEARCHSYNC_SECURE_CA", "SEARCHSYNC_SECURE_CA_FINGERPRINT",
		"SEARCHSYNC_SECURE_ADMIN_USER", "SEARCHSYNC_SECURE_ADMIN_PASSWORD",
		"SEARCHSYNC_SECURE_WRITER_USER", "SEARCHSYNC_SECURE_WRITER_PASSWORD",
		"SEARCHSYNC_SECURE_READONLY_USER", "SEARCHSYNC_SECURE_READONLY_PASSWORD",
		"SEARCHSYNC_SECURE_CLIENT_CERT", "SEARCHSYNC_SECURE_CLIENT_KEY")
	if err != nil {
		return SecureEngine{}, err
	}
	s := SecureEngine{
		URL: v[0], CAFile: v[1], CAFingerprint: v[2],
		AdminUser: v[3], AdminPassword: v[4],
		WriterUser: v[5], WriterPassword: v[6],
		ReadOnlyUser: v[7], ReadOnlyPassword: v[8],
		ClientCert: v[9], ClientKey: v[10],
	}
	for _, f := range []string{s.CAFile, s.ClientCert, s.ClientKey} {
		if _, err := os.Stat(f); err != nil {
			return SecureEngine{}, permanent{err}
		}
	}
	tc, err := s.TLSConfig()
	if err != nil {
		return SecureEngine{}, err
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, strings.TrimRight(s.URL, "/")+"/_cluster/health", nil)
	if err != nil {
		return SecureEngine{}, err
	}
	req.SetBasicAuth(s.AdminUser, s.AdminPassword)
	if err := expectStatus(c, req, http.StatusOK); err != nil {
		return SecureEngine{}, err
	}
	return s, nil
}

// TLSConfig trusts CAFile only (and presents no client certificate).
func (s SecureEngine) TLSConfig() (*tls.Config, error) {
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", s.CAFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

func findElasticsearch() (string, error) {
	v, err := envs("SEARCHSYNC_ES_URL")
	if err != nil {
		return "", err
	}
	u := strings.TrimRight(v[0], "/")
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(u + "/")
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if got := resp.Header.Get("X-Elastic-Product"); got != "Elasticsearch" {
		return "", fmt.Errorf("%s answers with X-Elastic-Product %q, not Elasticsearch", u, got)
	}
	if err := engineHealthy(u); err != nil {
		return "", err
	}
	return u, nil
}

func findAuthProxy() (AuthProxyEndpoint, error) {
	v, err := envs("SEARCHSYNC_AUTH_PROXY_URL", "SEARCHSYNC_AUTH_PROXY_API_KEY", "SEARCHSYNC_AUTH_PROXY_API_KEY_ID",
		"SEARCHSYNC_AUTH_PROXY_API_KEY_SECRET", "SEARCHSYNC_AUTH_PROXY_BEARER")
	if err != nil {
		return AuthProxyEndpoint{}, err
	}
	p := AuthProxyEndpoint{URL: strings.TrimRight(v[0], "/"), APIKey: v[1], APIKeyID: v[2], APIKeySecret: v[3], Bearer: v[4]}
	if want := base64.StdEncoding.EncodeToString([]byte(p.APIKeyID + ":" + p.APIKeySecret)); want != p.APIKey {
		return AuthProxyEndpoint{}, permanent{fmt.Errorf("SEARCHSYNC_AUTH_PROXY_API_KEY is not base64(SEARCHSYNC_AUTH_PROXY_API_KEY_ID:SEARCHSYNC_AUTH_PROXY_API_KEY_SECRET)")}
	}
	c := &http.Client{Timeout: 10 * time.Second}
	for _, tc := range []struct {
		auth string
		want int
	}{
		{"Bearer not-the-token", http.StatusUnauthorized},
		{"ApiKey " + p.APIKey, http.StatusOK},
	} {
		req, err := http.NewRequest(http.MethodGet, p.URL+"/_cluster/health", nil)
		if err != nil {
			return AuthProxyEndpoint{}, err
		}
		req.Header.Set("Authorization", tc.auth)
		if err := expectStatus(c, req, tc.want); err != nil {
			return AuthProxyEndpoint{}, err
		}
	}
	return p, nil
}

func expectStatus(c *http.Client, req *http.Request, want int) error {
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s answered %s, want %d", req.Method, req.URL.Redacted(), resp.Status, want)
	}
	return nil
}
