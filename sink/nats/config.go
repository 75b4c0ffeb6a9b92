package nats

import (
	"cmp"
	"time"

	"github.com/searchsync/searchsync/internal/secret"
	"github.com/searchsync/searchsync/internal/tlsconf"
)

// Config is a NATS consumer's JetStream publisher, in the YAML form of a
// consumer's nats section (internal/config decodes the file into it and
// validates it).
type Config struct {
	// URL of the NATS server. Default nats://127.0.0.1:4222. Env SEARCHSYNC_NATS_URL.
	URL string `yaml:"url"`
	// Subject is a template; {aggregate_type}, {event_type}, {tenant_id},
	// {aggregate_id} are replaced. Default "outbox.{aggregate_type}.{event_type}".
	Subject string `yaml:"subject"`
	// Stream is the JetStream stream that must hold the subjects. Required.
	Stream string `yaml:"stream"`
	// CreateStream lets searchsync create the stream (subjects "<prefix>.>"
	// from the template's literal prefix) or update it. Default false: the
	// stream must exist and cover every subject of the template; start-up
	// checks it.
	CreateStream bool `yaml:"create_stream"`
	// DuplicateWindow of the stream when searchsync creates it; an existing
	// stream must have at least this window. JetStream drops a message whose
	// Nats-Msg-Id (the event id) it saw within the window. Default 2m; must be
	// at least 2 × relay.lease_ttl so that a redelivery after a relay crash is
	// absorbed.
	DuplicateWindow time.Duration `yaml:"duplicate_window"`
	// Retention of the stream when searchsync creates it: limits, interest or
	// workqueue. Default limits.
	Retention string `yaml:"retention"`
	// MaxAge of the stream's messages when searchsync creates it. Default 0
	// (kept until the stream's other limits remove them).
	MaxAge time.Duration `yaml:"max_age"`
	// Timeout waiting for a PubAck. Default 5s.
	Timeout time.Duration `yaml:"timeout"`
	// MaxInFlight bounds the publishes awaiting their PubAck per batch.
	// Default 256.
	MaxInFlight int `yaml:"max_in_flight"`

	// At most one auth method of CredsFile, NKeySeedFile, Token and
	// Username/Password (default none). See docs/connections.md.

	// CredsFile is a NATS credentials file (a user JWT and its nkey seed, as
	// `nsc generate creds` writes it), for servers in operator/JWT mode.
	CredsFile string `yaml:"creds_file"`
	// NKeySeedFile is a file holding a user nkey seed (SU…), for servers
	// that list the user's public nkey.
	NKeySeedFile string `yaml:"nkey_seed_file"`
	// Token is an authorization token. A secret.
	Token secret.Ref `yaml:"token"`
	// Username and Password; both or neither. Password is a secret.
	Username string     `yaml:"username"`
	Password secret.Ref `yaml:"password"`
	// TLS is how the server's certificate is verified and which client
	// certificate searchsync presents. Setting it makes the connection use
	// TLS (as does a tls:// URL). Default: TLS only when the server asks for
	// it, verified against the system's CAs.
	TLS tlsconf.Config `yaml:"tls"`
}

// WithDefaults returns n with every zero field replaced by its default (the
// one its comment gives). It is the one place of these defaults:
// config.Load and New both call it.
func (n Config) WithDefaults() Config {
	n.URL = cmp.Or(n.URL, "nats://127.0.0.1:4222")
	n.Subject = cmp.Or(n.Subject, "outbox.{aggregate_type}.{event_type}")
	n.DuplicateWindow = cmp.Or(n.DuplicateWindow, 2*time.Minute)
	n.Timeout = cmp.Or(n.Timeout, 5*time.Second)
	n.Retention = cmp.Or(n.Retention, "limits")
	n.MaxInFlight = cmp.Or(n.MaxInFlight, 256)
	return n
}

// Auth methods, as AuthMethod names them.
const (
	AuthNone     = "none"
	AuthCreds    = "creds_file"
	AuthNKey     = "nkey_seed_file"
	AuthToken    = "token"
	AuthPassword = "username/password"
)

// AuthMethod is the configured auth method (the first when several are set,
// which internal/config refuses).
func (n Config) AuthMethod() string {
	if m := n.AuthMethods(); len(m) > 0 {
		return m[0]
	}
	return AuthNone
}

// AuthMethods are the auth methods set, in the order AuthMethod picks from:
// more than one is a configuration error.
func (n Config) AuthMethods() []string {
	var m []string
	if n.CredsFile != "" {
		m = append(m, AuthCreds)
	}
	if n.NKeySeedFile != "" {
		m = append(m, AuthNKey)
	}
	if n.Token != "" {
		m = append(m, AuthToken)
	}
	if n.Username != "" || n.Password != "" {
		m = append(m, AuthPassword)
	}
	return m
}
