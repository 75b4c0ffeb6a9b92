package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pki is a CA and certificates it signed, written to PEM files.
type pki struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // the CA's PEM
}

var serial int64

func newCA(t *testing.T, dir, name string) *pki {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	p := &pki{dir: dir, cert: cert, key: key, file: filepath.Join(dir, name+".pem")}
	writePEM(t, p.file, "CERTIFICATE", der)
	return p
}

// issue signs a leaf for hosts, valid from nb to na, and returns its
// tls.Certificate (chain: leaf, then extra) and the PEM files.
func (p *pki) issue(t *testing.T, name string, server bool, nb, na time.Time, extra ...*x509.Certificate) (tls.Certificate, string, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: nb, NotAfter: na, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	cf, kf := filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	writePEM(t, cf, "CERTIFICATE", der)
	writePEM(t, kf, "PRIVATE KEY", kder)
	chain := [][]byte{der}
	for _, c := range extra {
		chain = append(chain, c.Raw)
	}
	return tls.Certificate{Certificate: chain, PrivateKey: key}, cf, kf
}

func writePEM(t *testing.T, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// serve starts a real TLS server with the given certificate; clientCAs makes
// it require a client certificate signed by that CA.
func serve(t *testing.T, cert tls.Certificate, clientCAs *x509.CertPool) string {
	t.Helper()
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	if clientCAs != nil {
		s.TLS.ClientCAs = clientCAs
		s.TLS.ClientAuth = tls.RequireAndVerifyClientCert
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s.URL
}

func get(t *testing.T, c Config, url string) error {
	t.Helper()
	tc, err := c.BuildFor("engine.tls")
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	res, err := hc.Get(url)
	if err != nil {
		return Explain(err, "engine.tls", c)
	}
	defer res.Body.Close()
	return nil
}

func TestHandshakes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newCA(t, dir, "ca")
	other := newCA(t, dir, "other")
	now := time.Now()
	srv, _, _ := ca.issue(t, "server", true, now.Add(-time.Hour), now.Add(time.Hour), ca.cert)
	srvNoChain, _, _ := ca.issue(t, "server-nochain", true, now.Add(-time.Hour), now.Add(time.Hour))
	expired, _, _ := ca.issue(t, "expired", true, now.Add(-2*time.Hour), now.Add(-time.Hour), ca.cert)
	// An impostor: signed by another CA but appending the pinned CA's
	// certificate to its chain. A fingerprint check that only looks for the
	// fingerprint in the chain would accept it.
	impostor, _, _ := other.issue(t, "impostor", true, now.Add(-time.Hour), now.Add(time.Hour), ca.cert)
	_, ccf, ckf := ca.issue(t, "client", false, now.Add(-time.Hour), now.Add(time.Hour))
	_, occf, ockf := other.issue(t, "otherclient", false, now.Add(-time.Hour), now.Add(time.Hour))
	clientPool := x509.NewCertPool()
	clientPool.AddCert(ca.cert)

	url := serve(t, srv, nil)
	urlNoChain := serve(t, srvNoChain, nil)
	urlExpired := serve(t, expired, nil)
	urlImpostor := serve(t, impostor, nil)
	urlMTLS := serve(t, srv, clientPool)
	localhost := strings.Replace(url, "127.0.0.1", "localhost", 1)

	fp := Fingerprint(ca.cert)
	fpPlain := strings.ToLower(strings.ReplaceAll(fp, ":", ""))

	for _, tc := range []struct {
		name string
		c    Config
		url  string
		want string // "" = success, else a part of the error
	}{
		{"system CAs refuse a private CA", Config{}, url, "not signed by a system CA: set engine.tls.ca_file"},
		{"ca_file", Config{CAFile: ca.file}, url, ""},
		{"ca_file by DNS name", Config{CAFile: ca.file}, localhost, ""},
		{"wrong ca_file", Config{CAFile: other.file}, url, "not signed by a CA in engine.tls.ca_file"},
		{"server_name mismatch", Config{CAFile: ca.file, ServerName: "elsewhere.example"}, url, "set engine.tls.server_name"},
		{"server_name", Config{CAFile: ca.file, ServerName: "localhost"}, url, ""},
		{"expired", Config{CAFile: ca.file}, urlExpired, "has expired or is not valid yet"},
		{"fingerprint with colons", Config{CAFingerprint: fp}, url, ""},
		{"fingerprint plain lower-case", Config{CAFingerprint: fpPlain}, localhost, ""},
		{"fingerprint checks the host name", Config{CAFingerprint: fp, ServerName: "elsewhere.example"}, url, "set engine.tls.server_name"},
		{"fingerprint of the leaf", Config{CAFingerprint: Fingerprint(leaf(t, srvNoChain))}, urlNoChain, ""},
		{"fingerprint absent from the chain", Config{CAFingerprint: fp}, urlNoChain, "engine.tls.ca_fingerprint does not match"},
		{"wrong fingerprint", Config{CAFingerprint: Fingerprint(other.cert)}, url, "engine.tls.ca_fingerprint does not match"},
		{"impostor presenting the pinned CA", Config{CAFingerprint: fp}, urlImpostor, "does not verify up to the certificate of engine.tls.ca_fingerprint"},
		{"fingerprint and expired", Config{CAFingerprint: fp}, urlExpired, "has expired"},
		{"skip verify", Config{InsecureSkipVerify: true}, urlImpostor, ""},
		{"client certificate", Config{CAFile: ca.file, CertFile: ccf, KeyFile: ckf}, urlMTLS, ""},
		{"no client certificate", Config{CAFile: ca.file}, urlMTLS, "set engine.tls.cert_file and engine.tls.key_file"},
		{"refused client certificate", Config{CAFile: ca.file, CertFile: occf, KeyFile: ockf}, urlMTLS, "refused the client certificate in engine.tls.cert_file"},
	} {
		err := get(t, tc.c, tc.url)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}

func leaf(t *testing.T, c tls.Certificate) *x509.Certificate {
	x, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newCA(t, dir, "ca")
	_, cf, kf := ca.issue(t, "client", false, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	notPEM := filepath.Join(dir, "notpem")
	_ = os.WriteFile(notPEM, []byte("hello"), 0o600)
	missing := filepath.Join(dir, "missing.pem")
	fp := Fingerprint(ca.cert)
	for _, tc := range []struct {
		c    Config
		want []string
	}{
		{Config{}, nil},
		{Config{CAFile: ca.file, CertFile: cf, KeyFile: kf, ServerName: "x"}, nil},
		{Config{CAFingerprint: fp}, nil},
		{Config{CAFile: missing}, []string{"engine.tls.ca_file: open " + missing}},
		{Config{CAFile: notPEM}, []string{"engine.tls.ca_file: " + notPEM + " holds no PEM certificate"}},
		{Config{CAFingerprint: "AB:CD"}, []string{"engine.tls.ca_fingerprint: is not a SHA-256 fingerprint"}},
		{Config{CAFingerprint: fp, CAFile: ca.file}, []string{"engine.tls.ca_fingerprint: set ca_file or ca_fingerprint, not both"}},
		{Config{CertFile: cf}, []string{"engine.tls.key_file: is required with cert_file"}},
		{Config{KeyFile: kf}, []string{"engine.tls.cert_file: is required with key_file"}},
		{Config{CertFile: cf, KeyFile: ca.file}, []string{"engine.tls.cert_file: " + cf + " with " + ca.file}},
		{Config{CertFile: missing, KeyFile: kf}, []string{"engine.tls.cert_file: stat " + missing}},
		{Config{InsecureSkipVerify: true, CAFile: ca.file}, []string{"engine.tls.insecure_skip_verify: contradicts"}},
	} {
		err := tc.c.Validate("engine.tls")
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%+v: %v", tc.c, err)
			}
			continue
		}
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: err %v, want %q", tc.c, err, w)
			}
		}
		var te *Error
		if !errors.As(err, &te) {
			t.Errorf("%+v: %T is not a *tlsconf.Error", tc.c, err)
		}
		if _, err := tc.c.Build(); err == nil {
			t.Errorf("%+v: Build accepted an invalid config", tc.c)
		}
	}
}

func TestParseFingerprint(t *testing.T) {
	t.Parallel()
	// The form Elasticsearch 8 prints at its first start (64 hex, no colons).
	const es = "3ac8f9b04ae4ee1e0d5ad3ee0c1a9a8b51e0f5f6d3bb48e2bb4ae2f6a9d2d4a1"
	a, err := ParseFingerprint(es)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseFingerprint(strings.ToUpper(colons(es)))
	if err != nil || string(a) != string(b) {
		t.Fatalf("colon/upper form differs: %v", err)
	}
	for _, bad := range []string{"", "zz", es[:62], es + "00", "sha256:" + es} {
		if _, err := ParseFingerprint(bad); err == nil {
			t.Errorf("ParseFingerprint(%q) accepted", bad)
		}
	}
}

func colons(h string) string {
	var b strings.Builder
	for i := 0; i < len(h); i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(h[i : i+2])
	}
	return b.String()
}
