package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test: it signs server and
// client certificates and writes everything as PEM files in the test's
// temporary directory.
type CA struct {
	// CertFile is the CA certificate (PEM), what a client or server trusts.
	CertFile string

	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
}

// NewCA makes a CA named cn.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	key, tmpl := newKeyAndTemplate(t, cn)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{cert: cert, key: key, dir: t.TempDir()}
	ca.CertFile = ca.write(t, "ca.crt", "CERTIFICATE", der)
	return ca
}

// Server issues a server certificate for hosts (DNS names or IPs) and
// returns its certificate and key files.
func (ca *CA) Server(t testing.TB, hosts ...string) (certFile, keyFile string) {
	t.Helper()
	return ca.issue(t, hosts[0], x509.ExtKeyUsageServerAuth, hosts)
}

// Client issues a client certificate with common name cn.
func (ca *CA) Client(t testing.TB, cn string) (certFile, keyFile string) {
	t.Helper()
	return ca.issue(t, cn, x509.ExtKeyUsageClientAuth, nil)
}

// Pool is a pool holding the CA certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

func (ca *CA) issue(t testing.TB, cn string, usage x509.ExtKeyUsage, hosts []string) (string, string) {
	t.Helper()
	key, tmpl := newKeyAndTemplate(t, cn)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	name := Name("cert")
	return ca.write(t, name+".crt", "CERTIFICATE", der), ca.write(t, name+".key", "PRIVATE KEY", kder)
}

func (ca *CA) write(t testing.TB, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// newKeyAndTemplate is a new P-256 key and a certificate template named cn,
// valid from an hour ago for a day, with a random serial.
func newKeyAndTemplate(t testing.TB, cn string) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key, &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// PostgresTLS is the TLS material of the test PostgreSQL server, made by
// scripts/postgres.sh (exported by scripts/services.sh env).
type PostgresTLS struct {
	CA         string // SEARCHSYNC_PG_CA: the CA that signed the server's certificate
	ClientCert string // SEARCHSYNC_PG_CLIENT_CERT: a client certificate for CertUser
	ClientKey  string // SEARCHSYNC_PG_CLIENT_KEY
	CertUser   string // SEARCHSYNC_PG_CERT_USER: a role admitted by certificate alone
}

// PostgresTLSFiles returns the test server's TLS material from the
// environment, or from scripts/postgres.sh's default directory; the test
// fails with a hint when there is none.
func PostgresTLSFiles(t testing.TB) PostgresTLS {
	t.Helper()
	const dir = "/var/lib/postgresql/searchsync-tls"
	env := func(k, def string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return def
	}
	p := PostgresTLS{
		CA:         env("SEARCHSYNC_PG_CA", filepath.Join(dir, "ca.crt")),
		ClientCert: env("SEARCHSYNC_PG_CLIENT_CERT", filepath.Join(dir, "client.crt")),
		ClientKey:  env("SEARCHSYNC_PG_CLIENT_KEY", filepath.Join(dir, "client.key")),
		CertUser:   env("SEARCHSYNC_PG_CERT_USER", "searchsync_cert"),
	}
	for _, f := range []string{p.CA, p.ClientCert, p.ClientKey} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("testenv: no PostgreSQL TLS material (%v); run `scripts/postgres.sh tls` (done by `scripts/services.sh start`) and `eval \"$(scripts/services.sh env)\"`", err)
		}
	}
	return p
}
