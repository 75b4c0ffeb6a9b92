package indexer

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/opensearch-project/opensearch-go/v4/signer"
	"github.com/opensearch-project/opensearch-go/v4/signer/awsv2"

	"github.com/searchsync/searchsync/internal/secret"
	"github.com/searchsync/searchsync/internal/tlsconf"
)

// conn is how an adapter reaches its engine: the base URLs and one
// http.RoundTripper that carries TLS and authentication (basic, ApiKey,
// Bearer or SigV4) for every request, so that both clients and every other
// caller of the engine's HTTP API (reindex's scroll) authenticate the same
// way. The clients themselves get no credentials.
type conn struct {
	addresses []string
	transport http.RoundTripper
	cfg       Config
}

// ConfigError is a connection that cannot work until the configuration
// changes: a certificate that does not verify, missing AWS credentials, a
// server that does not speak TLS. It is not retried at start-up. Key names
// the setting to look at.
type ConfigError struct {
	Key string // e.g. engine.tls.ca_file
	Err error
}

func (e *ConfigError) Error() string { return e.Key + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// handshakeTimeout bounds a TLS handshake with the engine as a request is
// bounded (30 s), not by Go's separate 10 s default: a busy node that takes
// longer to shake hands than to answer is unavailable for that request, not
// for its handshake alone.
const handshakeTimeout = 30 * time.Second

// Transport returns the http.RoundTripper that reaches the engine of cfg
// with its TLS settings and credentials, on top of base (nil: a clone of
// http.DefaultTransport; an *http.Transport is cloned and given cfg's TLS).
// Callers that speak the engine's HTTP API outside the adapters use it, so
// that every request authenticates the same way.
func Transport(cfg Config, base http.RoundTripper) (http.RoundTripper, error) {
	if base == nil {
		base = http.DefaultTransport
	}
	if !cfg.TLS.IsZero() {
		t, ok := base.(*http.Transport)
		if !ok {
			return nil, fmt.Errorf("indexer: engine.tls needs an *http.Transport, not %T", base)
		}
		tc, err := cfg.TLS.BuildFor("engine.tls")
		if err != nil {
			return nil, err
		}
		t = t.Clone()
		t.TLSClientConfig = tc
		t.TLSHandshakeTimeout = handshakeTimeout
		base = t
	} else if t, ok := base.(*http.Transport); ok && base == http.DefaultTransport {
		t = t.Clone()
		t.TLSHandshakeTimeout = handshakeTimeout
		base = t
	}
	rt := &authTransport{base: base, tls: cfg.TLS}
	switch cfg.AuthMethod() {
	case AuthBasic:
		pw, err := cfg.Password.Resolve("engine.password")
		if err != nil {
			return nil, err
		}
		rt.header = secret.New("Basic " + base64.StdEncoding.EncodeToString([]byte(cfg.Username+":"+pw.Reveal())))
	case AuthAPIKey:
		v, err := cfg.APIKey.Resolve("engine.api_key")
		if err != nil {
			return nil, err
		}
		enc, err := EncodeAPIKey(v)
		if err != nil {
			return nil, &ConfigError{Key: "engine.api_key", Err: err}
		}
		rt.header = secret.New("ApiKey " + enc.Reveal())
	case AuthBearer:
		v, err := cfg.BearerToken.Resolve("engine.bearer_token")
		if err != nil {
			return nil, err
		}
		rt.header = secret.New("Bearer " + v.Reveal())
	case AuthAWS:
		s, err := awsSigner(context.Background(), *cfg.AWS)
		if err != nil {
			return nil, err
		}
		rt.signer = s
	}
	return rt, nil
}

// connect resolves cfg into the addresses and transport of an adapter.
func connect(cfg Config, hc *http.Client) (*conn, error) {
	addrs, err := cfg.Addresses()
	if err != nil {
		return nil, &ConfigError{Key: "engine.cloud_id", Err: err}
	}
	var base http.RoundTripper
	if hc != nil {
		base = hc.Transport
	}
	rt, err := Transport(cfg, base)
	if err != nil {
		return nil, fmt.Errorf("indexer: %w", err)
	}
	return &conn{addresses: addrs, transport: rt, cfg: cfg}, nil
}

// awsSigner loads the SDK's standard credential chain (with the profile and
// region of a), assumes a.RoleARN when set, and returns the SigV4 signer
// opensearch-go ships for service es or aoss.
func awsSigner(ctx context.Context, a AWSConfig) (signer.Signer, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if a.Region != "" {
		opts = append(opts, awsconfig.WithRegion(a.Region))
	}
	if a.Profile != "" {
		opts = append(opts, awsconfig.WithSharedConfigProfile(a.Profile))
	}
	ac, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		key := "engine.aws"
		if a.Profile != "" {
			key = "engine.aws.profile"
		}
		return nil, &ConfigError{Key: key, Err: fmt.Errorf("load the AWS configuration: %w", err)}
	}
	if ac.Region == "" {
		return nil, &ConfigError{Key: "engine.aws.region", Err: errors.New("no region: set it, or AWS_REGION, or the profile's region")}
	}
	if a.RoleARN != "" {
		ac.Credentials = aws.NewCredentialsCache(stscreds.NewAssumeRoleProvider(sts.NewFromConfig(ac), a.RoleARN,
			func(o *stscreds.AssumeRoleOptions) { o.RoleSessionName = "searchsync" }))
	}
	s, err := awsv2.NewSignerWithService(ac, cmp.Or(a.Service, "es"))
	if err != nil {
		return nil, &ConfigError{Key: "engine.aws.service", Err: err}
	}
	return s, nil
}

// authTransport adds the Authorization header (or the SigV4 signature) to
// each request and explains TLS failures by the setting to change.
type authTransport struct {
	base   http.RoundTripper
	header secret.Value // the whole Authorization value; zero: none
	signer signer.Signer
	tls    tlsconf.Config
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.header.IsZero() || t.signer != nil {
		req = req.Clone(req.Context())
		if !t.header.IsZero() {
			req.Header.Set("Authorization", t.header.Reveal())
		}
		if t.signer != nil {
			if err := t.signer.SignRequest(req); err != nil {
				if req.Context().Err() == nil {
					return nil, &ConfigError{Key: "engine.aws", Err: fmt.Errorf("sign the request (SigV4): %w", err)}
				}
				return nil, err
			}
		}
	}
	res, err := t.base.RoundTrip(req)
	if err != nil {
		var he *tlsconf.HandshakeError
		if ex := tlsconf.Explain(err, "engine.tls", t.tls); errors.As(ex, &he) {
			return nil, &ConfigError{Key: "engine.tls", Err: he}
		}
		if req.URL.Scheme == "http" && req.Context().Err() == nil && speaksTLS(req.Context(), req.URL.Host, err) {
			return nil, &ConfigError{Key: "engine.urls", Err: fmt.Errorf("%s answers with TLS, not plain HTTP: use https://%s (%w)", req.URL.Host, req.URL.Host, err)}
		}
	}
	return res, err
}

// speaksTLS reports whether a plain-HTTP request's failure err comes from a
// TLS port: the server closed the connection or answered with bytes that
// are no HTTP (a TLS alert), and a TLS handshake with host succeeds (its
// certificate is not checked: only whether it speaks TLS). Other failures
// (refused, timeouts) are not looked into.
func speaksTLS(ctx context.Context, host string, err error) bool {
	msg := err.Error()
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(msg, "malformed HTTP") &&
		!strings.Contains(msg, "connection reset by peer") {
		return false
	}
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // only asks whether the port speaks TLS; nothing is sent
	conn, derr := d.DialContext(dctx, "tcp", host)
	if derr != nil {
		return false
	}
	conn.Close()
	return true
}

// authHint says which setting to check when the engine answers 401.
func authHint(cfg Config) string {
	switch cfg.AuthMethod() {
	case AuthBasic:
		return "the engine refused the user and password: check engine.username and engine.password"
	case AuthAPIKey:
		return "the engine refused the API key: check engine.api_key (wrong, expired or invalidated)"
	case AuthBearer:
		return "the engine refused the token: check engine.bearer_token (wrong, expired or revoked)"
	case AuthAWS:
		return "the engine refused the SigV4 signature: check engine.aws.region, engine.aws.service and the credentials of the chain"
	}
	if cfg.TLS.CertFile != "" {
		return "the engine did not take the client certificate of engine.tls.cert_file for a user: its issuer must be a CA the engine " +
			"trusts for client certificates (OpenSearch: the node's HTTP truststore), and its subject must map to a user with a role"
	}
	return "the engine wants credentials: set engine.username and engine.password, engine.api_key, engine.bearer_token or engine.aws"
}

// TLSWarning is the start-up warning for engine.tls.insecure_skip_verify,
// or "" when it is off.
func TLSWarning(cfg Config) string {
	if !cfg.TLS.InsecureSkipVerify {
		return ""
	}
	return "engine.tls.insecure_skip_verify is on: the engine's certificate is not verified, anyone on the path can read and change the traffic (credentials included)"
}

// TLSSummary describes how the engine's certificate is verified, for status
// and the dashboard: "system CAs", "ca_file /etc/…", "ca_fingerprint
// 3A:…", "NOT VERIFIED (insecure_skip_verify)", or "none (http)".
func TLSSummary(cfg Config) string {
	addrs, _ := cfg.Addresses()
	https := false
	for _, a := range addrs {
		https = https || strings.HasPrefix(a, "https://")
	}
	if !https {
		return "none (http)"
	}
	var s string
	switch c := cfg.TLS; {
	case c.InsecureSkipVerify:
		s = "NOT VERIFIED (insecure_skip_verify)"
	case c.CAFile != "":
		s = "ca_file " + c.CAFile
	case c.CAFingerprint != "":
		s = "ca_fingerprint " + c.CAFingerprint
	default:
		s = "system CAs"
	}
	if cfg.TLS.CertFile != "" {
		s += ", client certificate " + cfg.TLS.CertFile
	}
	return s
}
