package webhook

import (
	"cmp"
	"time"

	"github.com/searchsync/searchsync/internal/tlsconf"
)

// Config is a webhook consumer's endpoint: a signed JSON POST, in the YAML
// form of a consumer's webhook section (internal/config decodes the file
// into it and validates it).
type Config struct {
	// URL of the endpoint. Required.
	URL string `yaml:"url"`
	// Secret signs requests (Standard Webhooks, HMAC-SHA256). Required. A
	// secret: "env:NAME" reads the environment variable NAME, "file:PATH"
	// the file.
	Secret string `yaml:"secret"`
	// Timeout of one request. Default 10s.
	Timeout time.Duration `yaml:"timeout"`
	// Concurrency is the most requests in flight. Default 8.
	Concurrency int `yaml:"concurrency"`
	// TLS is how the endpoint's certificate is verified and which client
	// certificate searchsync presents (mTLS endpoints); for https:// URLs.
	// Default: the system's CAs, no client certificate.
	TLS tlsconf.Config `yaml:"tls"`
}

// WithDefaults returns w with every zero field replaced by its default (the
// one its comment gives). It is the one place of these defaults:
// config.Load and New both call it.
func (w Config) WithDefaults() Config {
	w.Timeout = cmp.Or(w.Timeout, 10*time.Second)
	w.Concurrency = cmp.Or(w.Concurrency, 8)
	return w
}
