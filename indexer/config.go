package indexer

import (
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/searchsync/searchsync/internal/secret"
	"github.com/searchsync/searchsync/internal/tlsconf"
)

// Config is the search engine the adapters connect to, in the YAML form of
// the configuration's engine section (internal/config decodes the file into
// it and validates it): where it is (urls, or cloud_id for Elastic
// Cloud), how to trust it (tls) and who searchsync is to it (one of
// username/password, api_key, bearer_token or aws). Every secret accepts
// "env:NAME" and "file:PATH" besides the literal value. See
// docs/engine-connection.md.
type Config struct {
	// Kind is opensearch or elasticsearch. Default opensearch.
	Kind string `yaml:"kind"`
	// URLs of the engine's HTTP endpoints. Env SEARCHSYNC_ENGINE_URL (comma
	// separated). Default http://127.0.0.1:9200, unless cloud_id is set
	// (they exclude each other).
	URLs []string `yaml:"urls"`
	// CloudID is the Cloud ID of an Elastic Cloud deployment
	// ("name:base64(host$es_uuid$kibana_uuid)", shown on the deployment's
	// page); searchsync connects to https://<es_uuid>.<host> (port 443
	// unless the ID names one). Kind elasticsearch only; excludes urls.
	CloudID string `yaml:"cloud_id"`
	// Username and Password for HTTP basic auth; both or neither. Env
	// SEARCHSYNC_ENGINE_USERNAME, SEARCHSYNC_ENGINE_PASSWORD. Password is a
	// secret.
	Username string     `yaml:"username"`
	Password secret.Ref `yaml:"password"`
	// APIKey is an Elasticsearch API key, either the "encoded" value the
	// create-API-key answer holds (base64 of id:api_key) or "id:api_key";
	// sent as "Authorization: ApiKey <encoded>". A secret.
	APIKey secret.Ref `yaml:"api_key"`
	// BearerToken is sent as "Authorization: Bearer <token>": an
	// Elasticsearch service-account token, or a token a proxy or the
	// OpenSearch security plugin's JWT backend accepts. A secret.
	BearerToken secret.Ref `yaml:"bearer_token"`
	// AWS signs every request with AWS Signature Version 4, for Amazon
	// OpenSearch Service (service es) and Amazon OpenSearch Serverless
	// (service aoss). Kind opensearch only.
	AWS *AWSConfig `yaml:"aws"`
	// TLS is how the engine's certificate is verified and which client
	// certificate searchsync presents; for https:// URLs.
	TLS tlsconf.Config `yaml:"tls"`
}

// AWSConfig is SigV4 signing with the AWS SDK's standard credential chain
// (environment, shared config and credentials files, SSO, web identity,
// container and instance roles).
type AWSConfig struct {
	// Region of the domain or collection, e.g. eu-west-1. Default: the
	// SDK's (AWS_REGION, then the profile's region); start-up fails when
	// neither has one.
	Region string `yaml:"region"`
	// Service is es (Amazon OpenSearch Service) or aoss (Serverless).
	// Default es.
	Service string `yaml:"service"`
	// RoleARN, when set, is assumed through STS with the chain's
	// credentials (e.g. arn:aws:iam::123456789012:role/searchsync).
	RoleARN string `yaml:"role_arn"`
	// Profile of the shared config files to use. Default: AWS_PROFILE, then
	// "default".
	Profile string `yaml:"profile"`
}

// Auth methods, as AuthMethod names them.
const (
	AuthNone   = "none"
	AuthBasic  = "basic"
	AuthAPIKey = "api_key"
	AuthBearer = "bearer_token"
	AuthAWS    = "aws_sigv4"
)

// AuthMethod is the configured auth method: none, basic, api_key,
// bearer_token or aws_sigv4 (the first, when several are set, which
// internal/config refuses).
func (e Config) AuthMethod() string {
	m := e.AuthMethods()
	if len(m) == 0 {
		return AuthNone
	}
	return m[0]
}

// AuthMethods are the auth methods set, in the order AuthMethod picks from:
// more than one is a configuration error.
func (e Config) AuthMethods() []string {
	var m []string
	if e.Username != "" || e.Password != "" {
		m = append(m, AuthBasic)
	}
	if e.APIKey != "" {
		m = append(m, AuthAPIKey)
	}
	if e.BearerToken != "" {
		m = append(m, AuthBearer)
	}
	if e.AWS != nil {
		m = append(m, AuthAWS)
	}
	return m
}

// AuthSummary describes the auth method without its secret, for status
// and the dashboard: "basic (user writer, password from env:PW)".
func (e Config) AuthSummary() string {
	switch e.AuthMethod() {
	case AuthBasic:
		return fmt.Sprintf("basic (user %s, password %s)", e.Username, from(e.Password))
	case AuthAPIKey:
		return "api_key (" + from(e.APIKey) + ")"
	case AuthBearer:
		return "bearer_token (" + from(e.BearerToken) + ")"
	case AuthAWS:
		s := fmt.Sprintf("aws_sigv4 (service %s", e.AWS.Service)
		if e.AWS.Region != "" {
			s += ", region " + e.AWS.Region
		}
		if e.AWS.Profile != "" {
			s += ", profile " + e.AWS.Profile
		}
		if e.AWS.RoleARN != "" {
			s += ", role " + e.AWS.RoleARN
		}
		return s + ")"
	}
	if e.TLS.CertFile != "" {
		return "client certificate (" + e.TLS.CertFile + ")"
	}
	return AuthNone
}

func from(r secret.Ref) string {
	if src := r.Source(); src != "literal" {
		return "from " + src
	}
	return "literal in the configuration"
}

// Addresses are the base URLs to connect to: urls, or the one cloud_id
// names.
func (e Config) Addresses() ([]string, error) {
	if e.CloudID != "" {
		u, err := DecodeCloudID(e.CloudID)
		if err != nil {
			return nil, err
		}
		return []string{u}, nil
	}
	e = e.WithDefaults()
	out := make([]string, len(e.URLs))
	for i, u := range e.URLs {
		out[i] = strings.TrimRight(u, "/")
	}
	return out, nil
}

// DecodeCloudID returns the Elasticsearch URL of an Elastic Cloud ID:
// "[label:]base64(host[:port]$es_uuid[:port][$kibana_uuid[:port]])" →
// https://es_uuid.host[:port]; a port on the es_uuid wins over the host's,
// and without either the port is 443.
func DecodeCloudID(id string) (string, error) {
	enc := id
	if i := strings.LastIndexByte(id, ':'); i >= 0 {
		enc = id[i+1:]
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		// Some consoles drop the padding.
		if raw, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(enc, "=")); err != nil {
			return "", errors.New("is not a Cloud ID: the part after the last ':' is not base64")
		}
	}
	parts := strings.Split(string(raw), "$")
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return "", errors.New("is not a Cloud ID: it decodes to no host$es_uuid pair")
	}
	host, port := parts[0], ""
	if h, p, ok := cutPort(host); ok {
		host, port = h, p
	}
	uuid := parts[1]
	if u, p, ok := cutPort(uuid); ok {
		uuid, port = u, p
	}
	if port == "" || port == "443" {
		return "https://" + uuid + "." + host, nil
	}
	return "https://" + net.JoinHostPort(uuid+"."+host, port), nil
}

func cutPort(s string) (string, string, bool) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return s, "", false
	}
	if n, err := strconv.Atoi(s[i+1:]); err != nil || n <= 0 || n > 65535 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

// WithDefaults returns e with every zero field replaced by its default (the
// one its comment gives). It is the one place of these defaults:
// config.Load and New both call it.
func (e Config) WithDefaults() Config {
	e.Kind = cmp.Or(e.Kind, "opensearch")
	if len(e.URLs) == 0 && e.CloudID == "" {
		e.URLs = []string{"http://127.0.0.1:9200"}
	}
	if e.AWS != nil && e.AWS.Service == "" {
		a := *e.AWS // not the caller's
		a.Service = "es"
		e.AWS = &a
	}
	return e
}

// EncodeAPIKey returns the encoded form of an API key given either encoded
// (base64 of id:api_key) or as id:api_key. Errors never hold the key.
func EncodeAPIKey(v secret.Value) (secret.Value, error) {
	k := v.Reveal()
	if strings.Contains(k, ":") {
		id, key, _ := strings.Cut(k, ":")
		if id == "" || key == "" {
			return secret.Value{}, errors.New("id:api_key needs both parts")
		}
		return secret.New(base64.StdEncoding.EncodeToString([]byte(k))), nil
	}
	dec, err := base64.StdEncoding.DecodeString(k)
	if err != nil || !strings.Contains(string(dec), ":") {
		return secret.Value{}, errors.New(`is neither the "encoded" form of an API key (base64 of id:api_key) nor id:api_key`)
	}
	return v, nil
}

// reasonOf drops the key a *secret.Error starts with (the validator adds
