// Package tlsconf owns the TLS settings of searchsync's outgoing connections
// (the search engine's first): which CA to trust (a PEM file or the SHA-256
// fingerprint of a CA certificate the server presents), the client
// certificate, the server name, and the escape hatch insecure_skip_verify.
// It validates them with the configuration's key names, builds a *tls.Config,
// and explains a failed handshake in terms of the setting to change.
package tlsconf

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Config is the TLS of one client. The zero value verifies the server against
// the system's CAs with the host name of the URL.
type Config struct {
	// CAFile is a PEM file of the CA certificates to trust instead of the
	// system's. Default: the system's CAs.
	CAFile string `yaml:"ca_file"`
	// CAFingerprint is the SHA-256 of a CA certificate (DER), in hex, colons
	// optional, any case: the form Elasticsearch 8 prints at its first start
	// and `openssl x509 -fingerprint -sha256` prints. The server must present
	// a certificate with this fingerprint in its chain, and its certificate
	// must verify up to that one (with the host name checked when the URL
	// names a host, not an IP address). Excludes ca_file.
	CAFingerprint string `yaml:"ca_fingerprint"`
	// CertFile and KeyFile are the PEM client certificate and its
	// unencrypted private key, for servers that authenticate clients by
	// certificate. Both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name to verify the server's certificate against (and
	// to send as SNI). Default: the host of the URL.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify turns off every check of the server's certificate:
	// anyone on the path can read and change the traffic. For a laboratory
	// only; searchsync warns at start-up and shows it in `status`. Excludes
	// ca_file and ca_fingerprint. Default false.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// IsZero reports whether nothing is set.
func (c Config) IsZero() bool { return c == Config{} }

// Error is one invalid TLS setting.
type Error struct {
	Key    string // e.g. engine.tls.ca_file
	Reason string
}

func (e *Error) Error() string { return e.Key + ": " + e.Reason }

// Validate checks the settings, reading every file, and returns nil or the
// errors.Join of one *Error per problem. keyPrefix is the key of this block
// (engine.tls) and prefixes every key.
func (c Config) Validate(keyPrefix string) error {
	var errs []error
	add := func(key, reason string) { errs = append(errs, &Error{Key: keyPrefix + "." + key, Reason: reason}) }
	if c.CAFile != "" {
		if _, err := loadPool(c.CAFile); err != nil {
			add("ca_file", err.Error())
		}
	}
	if c.CAFingerprint != "" {
		if _, err := ParseFingerprint(c.CAFingerprint); err != nil {
			add("ca_fingerprint", err.Error())
		}
		if c.CAFile != "" {
			add("ca_fingerprint", "set ca_file or ca_fingerprint, not both")
		}
	}
	switch {
	case c.CertFile != "" && c.KeyFile == "":
		add("key_file", "is required with cert_file")
	case c.CertFile == "" && c.KeyFile != "":
		add("cert_file", "is required with key_file")
	case c.CertFile != "":
		if _, err := loadPair(c.CertFile, c.KeyFile); err != nil {
			add("cert_file", err.Error())
		}
	}
	if c.InsecureSkipVerify && (c.CAFile != "" || c.CAFingerprint != "") {
		add("insecure_skip_verify", "contradicts ca_file/ca_fingerprint: a CA is pointless when the certificate is not verified")
	}
	return errors.Join(errs...)
}

// Build returns the *tls.Config; keys in errors are under "tls".
func (c Config) Build() (*tls.Config, error) { return c.BuildFor("tls") }

// BuildFor is Build with errors naming keys under keyPrefix (engine.tls).
func (c Config) BuildFor(keyPrefix string) (*tls.Config, error) {
	if err := c.Validate(keyPrefix); err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pool, err := loadPool(c.CAFile)
		if err != nil {
			return nil, &Error{Key: keyPrefix + ".ca_file", Reason: err.Error()}
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		pair, err := loadPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, &Error{Key: keyPrefix + ".cert_file", Reason: err.Error()}
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	if c.CAFingerprint != "" {
		fp, _ := ParseFingerprint(c.CAFingerprint) // validated above
		// The usual verification would reject a chain whose root is not a
		// system CA; VerifyConnection does it instead, rooted at the pinned
		// certificate.
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			return verifyPinned(cs, fp, cmpOr(c.ServerName, cs.ServerName))
		}
	}
	if c.InsecureSkipVerify {
		tc.InsecureSkipVerify = true
	}
	return tc, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ParseFingerprint decodes a SHA-256 fingerprint: 64 hex digits, optionally
// in colon-separated pairs, any case.
func ParseFingerprint(s string) ([]byte, error) {
	h := strings.ReplaceAll(strings.TrimSpace(s), ":", "")
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != sha256.Size {
		return nil, errors.New("is not a SHA-256 fingerprint (64 hex digits, colons optional)")
	}
	return b, nil
}

// Fingerprint is the SHA-256 fingerprint of a certificate, upper-case hex in
// colon-separated pairs (the form openssl prints).
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	var b strings.Builder
	for i, x := range sum {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02X", x)
	}
	return b.String()
}

// FingerprintError is a server whose chain holds no certificate with the
// configured fingerprint.
type FingerprintError struct {
	Presented []string // fingerprints of the presented certificates, leaf first
}

func (e *FingerprintError) Error() string {
	if len(e.Presented) == 1 {
		return fmt.Sprintf("the server presents only its own certificate (fingerprint %s), not its CA: pin that one, or set ca_file to the CA's PEM", e.Presented[0])
	}
	return fmt.Sprintf("no certificate the server presented has the configured fingerprint (presented: %s)", strings.Join(e.Presented, ", "))
}

func verifyPinned(cs tls.ConnectionState, fp []byte, serverName string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the server presented no certificate")
	}
	var anchor *x509.Certificate
	var presented []string
	for _, cert := range cs.PeerCertificates {
		sum := sha256.Sum256(cert.Raw)
		if bytes.Equal(sum[:], fp) {
			anchor = cert
		}
		presented = append(presented, Fingerprint(cert))
	}
	if anchor == nil {
		return &FingerprintError{Presented: presented}
	}
	roots := x509.NewCertPool()
	roots.AddCert(anchor)
	inter := x509.NewCertPool()
	for _, cert := range cs.PeerCertificates[1:] {
		inter.AddCert(cert)
	}
	// A name that is an IP address was not sent as SNI and cannot be
	// checked here; DNS names are.
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, DNSName: serverName,
	})
	if err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	return nil
}

func loadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: certificate %d: %w", file, n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

func loadPair(certFile, keyFile string) (tls.Certificate, error) {
	if _, err := os.Stat(certFile); err != nil {
		return tls.Certificate{}, err
	}
	if _, err := os.Stat(keyFile); err != nil {
		return tls.Certificate{}, err
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		// The message of LoadX509KeyPair names what is wrong, never the key.
		return tls.Certificate{}, fmt.Errorf("%s with %s: %w", certFile, keyFile, err)
	}
	return pair, nil
}

// Explain turns a failed TLS handshake into an error that names the setting
// to look at (keyPrefix is engine.tls); other errors are returned unchanged.
// The returned error wraps err.
func Explain(err error, keyPrefix string, c Config) error {
	if err == nil {
		return nil
	}
	var (
		fpErr    *FingerprintError
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		alert    tls.AlertError
		recHdr   tls.RecordHeaderError
	)
	hint := ""
	switch {
	case errors.As(err, &fpErr):
		hint = keyPrefix + ".ca_fingerprint does not match any certificate the server presents"
	case errors.As(err, &unknown):
		if c.CAFile != "" {
			hint = "the server's certificate is not signed by a CA in " + keyPrefix + ".ca_file (" + c.CAFile + ")"
		} else if c.CAFingerprint != "" {
			hint = "the server's certificate does not verify up to the certificate of " + keyPrefix + ".ca_fingerprint"
		} else {
			hint = "the server's certificate is not signed by a system CA: set " + keyPrefix + ".ca_file or " + keyPrefix + ".ca_fingerprint"
		}
	case errors.As(err, &invalid):
		switch invalid.Reason {
		case x509.Expired:
			hint = "the server's certificate (or its CA) has expired or is not valid yet: renew it, or check this machine's clock"
		default:
			hint = "the server's certificate is not valid for a TLS server: check it and " + keyPrefix + ".ca_file"
		}
	case errors.As(err, &hostname):
		hint = "the server's certificate is not for this host: use the name it holds in the URL, or set " + keyPrefix + ".server_name"
	case errors.As(err, &alert):
		// The server refused us: on a client certificate, mostly.
		switch uint8(alert) {
		case 42, 43, 44, 45, 46, 48, 116: // bad/unsupported/revoked/expired/unknown certificate, unknown CA, certificate required
			if c.CertFile == "" {
				hint = "the server wants a client certificate: set " + keyPrefix + ".cert_file and " + keyPrefix + ".key_file"
			} else {
				hint = "the server refused the client certificate in " + keyPrefix + ".cert_file"
			}
		}
	case errors.As(err, &recHdr):
		hint = "the server does not speak TLS on this port: use an http:// URL, or the TLS port"
	case strings.Contains(err.Error(), "certificate required"), strings.Contains(err.Error(), "bad certificate"):
		if c.CertFile == "" {
			hint = "the server wants a client certificate: set " + keyPrefix + ".cert_file and " + keyPrefix + ".key_file"
		} else {
			hint = "the server refused the client certificate in " + keyPrefix + ".cert_file"
		}
	}
	if hint == "" {
		return err
	}
	return &HandshakeError{Hint: hint, Err: err}
}

// HandshakeError is a failed TLS handshake with the setting to look at.
type HandshakeError struct {
	Hint string
	Err  error
}

func (e *HandshakeError) Error() string { return "TLS: " + e.Hint + ": " + e.Err.Error() }
func (e *HandshakeError) Unwrap() error { return e.Err }
