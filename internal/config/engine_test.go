package config

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/searchsync/searchsync/internal/secret"
)

// TestDecodeCloudID decodes the Cloud IDs of Elastic's documentation: the
// Beats "Configure the output for Elastic Cloud" example (no port) and the
// Kibana cloud plugin's example (port on the host), plus the forms with a
// port on the Elasticsearch UUID and without a label.
func TestDecodeCloudID(t *testing.T) {
	t.Parallel()
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct{ id, want string }{
		{
			"staging:dXMtZWFzdC0xLmF3cy5mb3VuZC5pbyRjZWM2ZjI2MWE3NGJmMjRjZTMzYmI4ODExYjg0Mjk0ZiRjNmMyY2E2ZDA0MjI0OWFmMGNjN2Q3YTllOTYyNTc0Mw==",
			"https://cec6f261a74bf24ce33bb8811b84294f.us-east-1.aws.found.io",
		},
		{
			"my-deployment:" + enc("eastus2.azure.elastic-cloud.com:9243$59ef636c6917463db140321484d63cfa$a8b109c08adc43279ef48f29af1a3911"),
			"https://59ef636c6917463db140321484d63cfa.eastus2.azure.elastic-cloud.com:9243",
		},
		{
			enc("us-central1.gcp.cloud.es.io$abc123:9244$kib456:9245"),
			"https://abc123.us-central1.gcp.cloud.es.io:9244",
		},
		{
			"name:with:colons:" + enc("europe-west1.gcp.cloud.es.io:443$e1$k1"),
			"https://e1.europe-west1.gcp.cloud.es.io",
		},
		{ // padding dropped
			"x:" + strings.TrimRight(enc("h.example$u1"), "="),
			"https://u1.h.example",
		},
	} {
		got, err := DecodeCloudID(tc.id)
		if err != nil || got != tc.want {
			t.Errorf("DecodeCloudID(%q) = %q, %v; want %q", tc.id, got, err, tc.want)
		}
	}
	for _, bad := range []string{"staging:not base64!", "x:" + enc("justahost"), "x:" + enc("$uuid"), "x:" + enc("host$")} {
		if _, err := DecodeCloudID(bad); err == nil {
			t.Errorf("DecodeCloudID(%q) accepted", bad)
		}
	}
}

func TestEncodeAPIKey(t *testing.T) {
	t.Parallel()
	const id, key = "VuaCfGcBCdbkQm-e5aOx", "ui2lp2axTNmsyakw9tvNnw"
	encoded := base64.StdEncoding.EncodeToString([]byte(id + ":" + key))
	for _, in := range []string{encoded, id + ":" + key} {
		got, err := EncodeAPIKey(secret.New(in))
		if err != nil || got.Reveal() != encoded {
			t.Errorf("EncodeAPIKey: %v, %v", got.Reveal() == encoded, err)
		}
	}
	for _, bad := range []string{"not-base64-and-no-colon", base64.StdEncoding.EncodeToString([]byte("nocolon")), ":key9", "id9:"} {
		_, err := EncodeAPIKey(secret.New(bad))
		if err == nil {
			t.Errorf("EncodeAPIKey(%q) accepted", bad)
		} else if strings.Contains(err.Error(), bad) {
			t.Errorf("the error repeats the key: %v", err)
		}
	}
}

func TestEngineValidation(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("hunter2-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ENGINE_TEST_TOKEN", "tok-from-env")
	cloud := "staging:dXMtZWFzdC0xLmF3cy5mb3VuZC5pbyRjZWM2ZjI2MWE3NGJmMjRjZTMzYmI4ODExYjg0Mjk0ZiRjNmMyY2E2ZDA0MjI0OWFmMGNjN2Q3YTllOTYyNTc0Mw=="
	base := "database:\n  url: postgres://u:p@127.0.0.1:5432/db\nengine:\n"
	for _, tc := range []struct {
		name, engine string
		want         []string // parts of the error; none: valid
		auth         string
	}{
		{"none", "  kind: opensearch\n", nil, "none"},
		{"basic from file", "  username: writer\n  password: file:" + pw + "\n", nil, "basic (user writer, password from file:" + pw + ")"},
		{"bearer from env", "  bearer_token: env:ENGINE_TEST_TOKEN\n", nil, "bearer_token (from env:ENGINE_TEST_TOKEN)"},
		{"api key id:key", "  api_key: \"abc:def\"\n", nil, "api_key (literal in the configuration)"},
		{"aws", "  aws:\n    region: eu-west-1\n", nil, "aws_sigv4 (service es, region eu-west-1)"},
		{"aws serverless", "  aws:\n    region: eu-west-1\n    service: aoss\n    role_arn: arn:aws:iam::123456789012:role/searchsync\n", nil, "aws_sigv4 (service aoss, region eu-west-1, role arn:aws:iam::123456789012:role/searchsync)"},
		{"cloud id", "  kind: elasticsearch\n  cloud_id: " + cloud + "\n  api_key: \"abc:def\"\n", nil, "api_key (literal in the configuration)"},
		{"two methods", "  username: u\n  password: p\n  api_key: \"a:b\"\n", []string{":3: engine: sets basic and api_key: choose one auth method"}, ""},
		{"username alone", "  username: u\n", []string{"engine.password: is required with engine.username"}, ""},
		{"password alone", "  password: p\n", []string{"engine.username: is required with engine.password"}, ""},
		{"missing env", "  bearer_token: env:ENGINE_TEST_NOT_SET_XYZ\n", []string{"engine.bearer_token: environment variable ENGINE_TEST_NOT_SET_XYZ is not set"}, ""},
		{"missing file", "  username: u\n  password: file:" + filepath.Join(dir, "nope") + "\n", []string{"engine.password: cannot read secret file: open " + filepath.Join(dir, "nope")}, ""},
		{"bad api key", "  api_key: c2VjcmV0\n", []string{"engine.api_key: is neither the \"encoded\" form"}, ""},
		{"cloud id with opensearch", "  cloud_id: " + cloud + "\n", []string{"engine.cloud_id: is for kind elasticsearch"}, ""},
		{"cloud id with urls", "  kind: elasticsearch\n  cloud_id: " + cloud + "\n  urls: [\"https://a:9200\"]\n", []string{"engine.cloud_id: excludes engine.urls"}, ""},
		{"bad cloud id", "  kind: elasticsearch\n  cloud_id: \"x:bm9wZQ==\"\n", []string{"engine.cloud_id: is not a Cloud ID"}, ""},
		{"aws with elasticsearch", "  kind: elasticsearch\n  aws:\n    region: eu-west-1\n", []string{"engine.aws: SigV4 is for Amazon OpenSearch Service"}, ""},
		{"aws bad service", "  aws:\n    service: s3\n", []string{"engine.aws.service: \"s3\" is not one of es"}, ""},
		{"aws bad role", "  aws:\n    role_arn: searchsync\n", []string{"engine.aws.role_arn: is not an ARN"}, ""},
		{"tls on http", "  urls: [\"http://a:9200\"]\n  tls:\n    insecure_skip_verify: true\n", []string{"engine.tls: is set, but no engine URL is https://"}, ""},
		{"tls missing ca", "  urls: [\"https://a:9200\"]\n  tls:\n    ca_file: " + filepath.Join(dir, "ca.pem") + "\n", []string{"engine.tls.ca_file: open " + filepath.Join(dir, "ca.pem")}, ""},
		{"tls bad fingerprint", "  urls: [\"https://a:9200\"]\n  tls:\n    ca_fingerprint: abc\n", []string{"engine.tls.ca_fingerprint: is not a SHA-256 fingerprint"}, ""},
		{"credentials in url", "  urls: [\"https://u:p@a:9200\"]\n", []string{"engine.urls[0]: must not hold credentials"}, ""},
	} {
		c, err := Parse("e.yaml", []byte(base+tc.engine))
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				continue
			}
			if got := c.Engine.AuthSummary(); got != tc.auth {
				t.Errorf("%s: AuthSummary %q, want %q", tc.name, got, tc.auth)
			}
			continue
		}
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: err %v, want %q", tc.name, err, w)
			}
		}
		for _, s := range []string{"hunter2-from-file", "tok-from-env"} {
			if err != nil && strings.Contains(err.Error(), s) {
				t.Errorf("%s: the error holds a secret: %v", tc.name, err)
			}
		}
	}
}
