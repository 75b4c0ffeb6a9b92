package indexer_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/searchsync/searchsync/indexer"
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
		got, err := indexer.DecodeCloudID(tc.id)
		if err != nil || got != tc.want {
			t.Errorf("DecodeCloudID(%q) = %q, %v; want %q", tc.id, got, err, tc.want)
		}
	}
	for _, bad := range []string{"staging:not base64!", "x:" + enc("justahost"), "x:" + enc("$uuid"), "x:" + enc("host$")} {
		if _, err := indexer.DecodeCloudID(bad); err == nil {
			t.Errorf("DecodeCloudID(%q) accepted", bad)
		}
	}
}

func TestEncodeAPIKey(t *testing.T) {
	t.Parallel()
	const id, key = "VuaCfGcBCdbkQm-e5aOx", "ui2lp2axTNmsyakw9tvNnw"
	encoded := base64.StdEncoding.EncodeToString([]byte(id + ":" + key))
	for _, in := range []string{encoded, id + ":" + key} {
		got, err := indexer.EncodeAPIKey(secret.New(in))
		if err != nil || got.Reveal() != encoded {
			t.Errorf("EncodeAPIKey: %v, %v", got.Reveal() == encoded, err)
		}
	}
	for _, bad := range []string{"not-base64-and-no-colon", base64.StdEncoding.EncodeToString([]byte("nocolon")), ":key9", "id9:"} {
		_, err := indexer.EncodeAPIKey(secret.New(bad))
		if err == nil {
			t.Errorf("EncodeAPIKey(%q) accepted", bad)
		} else if strings.Contains(err.Error(), bad) {
			t.Errorf("the error repeats the key: %v", err)
		}
	}
}
