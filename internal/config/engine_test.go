package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
