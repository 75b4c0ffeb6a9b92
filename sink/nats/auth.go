package nats

import (
	"errors"
	"fmt"
	"strings"

	natsgo "github.com/nats-io/nats.go"

	"github.com/searchsync/searchsync/internal/secret"
	"github.com/searchsync/searchsync/internal/tlsconf"
)

// authOptions turns the configured auth method and tls block into
// connection options. Secrets are resolved here, each time the consumer
// connects, so that a rotated file or variable is read again.
func (c *Consumer) authOptions() ([]natsgo.Option, error) {
	var opts []natsgo.Option
	switch c.cfg.AuthMethod() {
	case AuthCreds:
		opts = append(opts, natsgo.UserCredentials(c.cfg.CredsFile))
	case AuthNKey:
		o, err := natsgo.NkeyOptionFromSeed(c.cfg.NKeySeedFile)
		if err != nil {
			return nil, c.configErr("nats.nkey_seed_file", "%s: %v", c.cfg.NKeySeedFile, err)
		}
		opts = append(opts, o)
	case AuthToken:
		if err := c.cfg.Token.Check("nats.token"); err != nil {
			return nil, c.configErr("nats.token", "%v", err)
		}
		opts = append(opts, natsgo.TokenHandler(func() string { return c.reread("nats.token", c.cfg.Token) }))
	case AuthPassword:
		if err := c.cfg.Password.Check("nats.password"); err != nil {
			return nil, c.configErr("nats.password", "%v", err)
		}
		opts = append(opts, natsgo.UserInfoHandler(func() (string, string) {
			return c.cfg.Username, c.reread("nats.password", c.cfg.Password)
		}))
	}
	if !c.cfg.TLS.IsZero() {
		tc, err := c.cfg.TLS.BuildFor("nats.tls")
		if err != nil {
			return nil, c.configErr("nats.tls", "%v", err)
		}
		opts = append(opts, natsgo.Secure(tc))
	}
	return opts, nil
}

// reread resolves a secret for one (re)connect, so that a rotated file or
// variable is used; a secret that cannot be read any more is logged (its
// key and why, never a value) and sent empty, which the server refuses.
func (c *Consumer) reread(key string, ref secret.Ref) string {
	v, err := ref.Resolve(key)
	if err != nil {
		c.logger.Warn("nats: cannot read the secret for a reconnect", "error", err)
	}
	return v.Reveal()
}

// authKey is the setting to check when the server refuses the credentials.
func (c *Consumer) authKey() string {
	switch c.cfg.AuthMethod() {
	case AuthCreds:
		return "nats.creds_file"
	case AuthNKey:
		return "nats.nkey_seed_file"
	case AuthToken:
		return "nats.token"
	case AuthPassword:
		return "nats.password"
	}
	return "nats"
}

// isAuthErr reports whether the server refused who we are.
func isAuthErr(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, natsgo.ErrAuthorization) || errors.Is(err, natsgo.ErrAuthExpired) || errors.Is(err, natsgo.ErrAuthRevoked) ||
		errors.Is(err, natsgo.ErrAccountAuthExpired) {
		return true
	}
	m := strings.ToLower(err.Error())
	return strings.Contains(m, "authorization violation") || strings.Contains(m, "authentication expired") ||
		strings.Contains(m, "authentication revoked")
}

// authReason explains a refusal of the credentials, naming the key.
func (c *Consumer) authReason(err error) string {
	if c.cfg.AuthMethod() == AuthNone {
		return fmt.Sprintf("%s refused the connection (%v): the server wants credentials: set one of nats.creds_file, nats.nkey_seed_file, nats.token, nats.username and nats.password", c.shownURL, err)
	}
	return fmt.Sprintf("%s refused the credentials of %s (%s): %v", c.shownURL, c.authKey(), c.cfg.AuthMethod(), err)
}

// connectErr classifies a failed connect. Credentials the server refuses
// and a TLS setup that cannot work are *ConfigError: start-up stops with the
// key instead of waiting for a server that will never accept us. Anything
// else (refused, timeout) is transient.
func (c *Consumer) connectErr(err error) error {
	if isAuthErr(err) {
		return c.configErr(c.authKey(), "%s", c.authReason(err))
	}
	var he *tlsconf.HandshakeError
	if ex := tlsconf.Explain(err, "nats.tls", c.cfg.TLS); errors.As(ex, &he) {
		return c.configErr("nats.tls", "%s: %v", c.shownURL, ex)
	}
	switch {
	case errors.Is(err, natsgo.ErrSecureConnRequired):
		return c.configErr("nats.tls", "%s requires TLS: set nats.tls (e.g. ca_file) or use a tls:// URL", c.shownURL)
	case errors.Is(err, natsgo.ErrSecureConnWanted):
		return c.configErr("nats.tls", "%s does not offer TLS, but nats.tls is set or the URL is tls://", c.shownURL)
	case errors.Is(err, natsgo.ErrClientCertOrRootCAsRequired):
		return c.configErr("nats.tls", "%s wants a client certificate: set nats.tls.cert_file and nats.tls.key_file", c.shownURL)
	}
	return fmt.Errorf("nats: connect %s: %w", c.shownURL, err)
}

// lastAuthErr is "; <why the server refused us>" when the last reconnect
// failed on the credentials (rotated or revoked while running: an outage
// that pauses the consumer until the server accepts them again), else "".
func (c *Consumer) lastAuthErr() string {
	if err := c.nc.LastError(); isAuthErr(err) {
		return "; " + c.authReason(err)
	}
	return ""
}
