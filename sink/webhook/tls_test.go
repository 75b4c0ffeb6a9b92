package webhook

import (
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/internal/tlsconf"
)

func secretFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// mtlsEndpoint is a real HTTPS endpoint whose certificate ca signed and
// that requires a client certificate ca signed too.
func mtlsEndpoint(t *testing.T, ca *testenv.CA) *httptest.Server {
	t.Helper()
	certFile, keyFile := ca.Server(t, "127.0.0.1")
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 || r.TLS.PeerCertificates[0].Subject.CommonName != "searchsync" {
			http.Error(w, "who are you", http.StatusForbidden)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
		MinVersion:   tls.VersionTLS12,
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func TestMutualTLSEndpoint(t *testing.T) {
	t.Parallel()
	ca := testenv.NewCA(t, "webhook test CA")
	srv := mtlsEndpoint(t, ca)
	cert, key := ca.Client(t, "searchsync")

	c := newConsumer(t, srv.URL, func(w *Config) {
		w.TLS = tlsconf.Config{CAFile: ca.CertFile, CertFile: cert, KeyFile: key}
	})
	for i, o := range c.Deliver(t.Context(), events(2, 2)) {
		if o.Kind != delivery.OK {
			t.Fatalf("event %d over mTLS: %v %s", i, o.Kind, o.Reason)
		}
	}

	// server_name: the certificate names 127.0.0.1 only.
	c = newConsumer(t, srv.URL, func(w *Config) {
		w.TLS = tlsconf.Config{CAFile: ca.CertFile, CertFile: cert, KeyFile: key, ServerName: "hooks.example.com"}
	})
	o := c.Deliver(t.Context(), events(1, 1))[0]
	if o.Kind != delivery.Unavailable || !strings.Contains(o.Reason, "webhook.tls.server_name") {
		t.Errorf("wrong server_name: %v %s", o.Kind, o.Reason)
	}
}

func TestMutualTLSFailuresNameTheSetting(t *testing.T) {
	t.Parallel()
	ca := testenv.NewCA(t, "webhook test CA")
	srv := mtlsEndpoint(t, ca)
	cert, key := ca.Client(t, "searchsync")
	other := testenv.NewCA(t, "some other CA")
	otherCert, otherKey := other.Client(t, "searchsync")

	for _, tc := range []struct {
		name string
		tls  tlsconf.Config
		want string
	}{
		{"wrong CA", tlsconf.Config{CAFile: other.CertFile, CertFile: cert, KeyFile: key},
			"not signed by a CA in webhook.tls.ca_file (" + other.CertFile + ")"},
		{"no client certificate", tlsconf.Config{CAFile: ca.CertFile},
			"set webhook.tls.cert_file and webhook.tls.key_file"},
		{"client certificate of another CA", tlsconf.Config{CAFile: ca.CertFile, CertFile: otherCert, KeyFile: otherKey},
			"refused the client certificate in webhook.tls.cert_file"},
	} {
		c := newConsumer(t, srv.URL, func(w *Config) { w.TLS = tc.tls })
		o := c.Deliver(t.Context(), events(1, 1))[0]
		// A handshake that fails is an outage of the endpoint (docs/outages.md):
		// the consumer pauses, no event loses an attempt.
		if o.Kind != delivery.Unavailable || !strings.Contains(o.Reason, tc.want) {
			t.Errorf("%s: %v %q, want Unavailable naming %q", tc.name, o.Kind, o.Reason, tc.want)
		}
	}

	// Files that cannot work stop New with the key.
	for _, tc := range []struct {
		tls  tlsconf.Config
		want string
	}{
		{tlsconf.Config{CAFile: "/nonexistent/ca.pem"}, "webhook.tls.ca_file"},
		{tlsconf.Config{CertFile: cert}, "webhook.tls.key_file"},
		{tlsconf.Config{CertFile: cert, KeyFile: otherKey}, "webhook.tls.cert_file"},
	} {
		_, err := New("hook", Config{URL: srv.URL, Secret: testSecret, TLS: tc.tls}, nil, nil)
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with %+v: %v, want a ConfigError naming %s", tc.tls, err, tc.want)
		}
	}
	_, err := New("hook", Config{URL: "http://127.0.0.1:1/", Secret: testSecret, TLS: tlsconf.Config{CAFile: ca.CertFile}}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "webhook.url is not https://") {
		t.Errorf("tls with an http:// URL: %v", err)
	}
}
