package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/secret"
	"github.com/searchsync/searchsync/internal/tlsconf"
)

// The engine section is indexer.Config, which owns its defaults
// (WithDefaults) and the helpers the checks below use (AuthMethods,
// DecodeCloudID, EncodeAPIKey); validateEngine points every complaint at
// its key and line.

func (c *Config) validateEngine(v *validator) {
	e := c.Engine
	switch e.Kind {
	case "opensearch", "elasticsearch":
	default:
		v.add("engine.kind", fmt.Sprintf("%q is not one of opensearch, elasticsearch", e.Kind))
	}
	https := false
	for i, u := range e.URLs {
		key := fmt.Sprintf("engine.urls[%d]", i)
		v.httpURL(key, u)
		if p, err := url.Parse(u); err == nil {
			if p.User != nil {
				v.add(key, "must not hold credentials: set engine.username and engine.password")
			}
			https = https || p.Scheme == "https"
		}
	}
	if e.CloudID != "" {
		https = true
		switch {
		case e.Kind != "elasticsearch":
			v.add("engine.cloud_id", "is for kind elasticsearch (Elastic Cloud); set engine.kind: elasticsearch")
		case len(e.URLs) > 0:
			v.add("engine.cloud_id", "excludes engine.urls (and SEARCHSYNC_ENGINE_URL): the Cloud ID names the endpoint")
		}
		if _, err := indexer.DecodeCloudID(e.CloudID); err != nil {
			v.add("engine.cloud_id", err.Error())
		}
	}
	if m := e.AuthMethods(); len(m) > 1 {
		v.add("engine", fmt.Sprintf("sets %s: choose one auth method of username/password, api_key, bearer_token, aws", strings.Join(m, " and ")))
	}
	switch {
	case e.Username != "" && e.Password == "":
		v.add("engine.password", "is required with engine.username")
	case e.Username == "" && e.Password != "":
		v.add("engine.username", "is required with engine.password")
	}
	for _, s := range []struct {
		key string
		ref secret.Ref
	}{{"engine.password", e.Password}, {"engine.bearer_token", e.BearerToken}} {
		c.checkSecret(v, SecretsEngine, s.key, s.ref)
	}
	if e.APIKey != "" && !c.reads(SecretsEngine) {
		c.checkSecret(v, SecretsEngine, "engine.api_key", e.APIKey)
	} else if e.APIKey != "" {
		if val, err := e.APIKey.Resolve("engine.api_key"); err != nil {
			v.add("engine.api_key", reasonOf(err))
		} else if _, err := indexer.EncodeAPIKey(val); err != nil {
			v.add("engine.api_key", err.Error())
		}
	}
	if a := e.AWS; a != nil {
		if e.Kind == "elasticsearch" {
			v.add("engine.aws", "SigV4 is for Amazon OpenSearch Service and Serverless: set engine.kind: opensearch "+
				"(the Elasticsearch 8 client refuses those servers, which are not Elasticsearch)")
		}
		switch a.Service {
		case "es", "aoss":
		default:
			v.add("engine.aws.service", fmt.Sprintf("%q is not one of es (OpenSearch Service), aoss (Serverless)", a.Service))
		}
		if a.RoleARN != "" && !strings.HasPrefix(a.RoleARN, "arn:") {
			v.add("engine.aws.role_arn", "is not an ARN (arn:aws:iam::<account>:role/<name>)")
		}
		if a.Region != "" && strings.ContainsAny(a.Region, " /:") {
			v.add("engine.aws.region", fmt.Sprintf("%q is not an AWS region such as eu-west-1", a.Region))
		}
	}
	if err := e.TLS.Validate("engine.tls"); err != nil {
		for _, err := range unjoin(err) {
			var te *tlsconf.Error
			if errors.As(err, &te) {
				v.add(te.Key, te.Reason)
			} else {
				v.add("engine.tls", err.Error())
			}
		}
	}
	if !e.TLS.IsZero() && !https {
		v.add("engine.tls", "is set, but no engine URL is https://")
	}
}

// its own, with the line).
func reasonOf(err error) string {
	var se *secret.Error
	if errors.As(err, &se) {
		if se.Err != nil {
			return se.Reason + ": " + se.Err.Error()
		}
		return se.Reason
	}
	return err.Error()
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
