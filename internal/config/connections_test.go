package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

const natsGood = `
database:
  url: postgres://u:p@127.0.0.1:5432/db
consumers:
  - name: bus
    type: nats
    nats:
      stream: OUTBOX
`

func TestNatsAuthValidation(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	user, _ := nkeys.CreateUser()
	seed, _ := user.Seed()
	pub, _ := user.PublicKey()
	acct, _ := nkeys.CreateAccount()
	acctSeed, _ := acct.Seed()
	seedFile := write("user.nk", string(seed))
	t.Setenv("SEARCHSYNC_TEST_NATS_PW", "from-env")
	for _, tc := range []struct {
		name, add, want string
	}{
		{"token", "      token: s3cret\n", ""},
		{"token from env", "      token: env:SEARCHSYNC_TEST_NATS_PW\n", ""},
		{"user and password", "      username: u\n      password: env:SEARCHSYNC_TEST_NATS_PW\n", ""},
		{"nkey seed", "      nkey_seed_file: " + seedFile + "\n", ""},
		{"two methods", "      token: t\n      nkey_seed_file: " + seedFile + "\n",
			"bad.yaml:7: consumers[0].nats: sets nkey_seed_file and token: choose one auth method"},
		{"user without password", "      username: u\n", "bad.yaml:7: consumers[0].nats.password: is required with nats.username"},
		{"unset variable", "      token: env:SEARCHSYNC_TEST_NATS_UNSET\n", "bad.yaml:9: consumers[0].nats.token: environment variable SEARCHSYNC_TEST_NATS_UNSET is not set"},
		{"missing secret file", "      token: file:/nonexistent/token\n", "consumers[0].nats.token: cannot read secret file: open /nonexistent/token"},
		{"public key as seed", "      nkey_seed_file: " + write("pub.nk", pub) + "\n", "consumers[0].nats.nkey_seed_file: "},
		{"account seed", "      nkey_seed_file: " + write("acct.nk", string(acctSeed)) + "\n", "not a user seed"},
		{"not a creds file", "      creds_file: " + seedFile + "\n", "consumers[0].nats.creds_file: " + seedFile + " holds no user JWT"},
		{"credentials in the URL", "      url: nats://u:pw@127.0.0.1:4222\n", "bad.yaml:9: consumers[0].nats.url: must not hold credentials"},
		{"missing CA", "      tls: {ca_file: /nonexistent/ca.pem}\n", "bad.yaml:9: consumers[0].nats.tls.ca_file: open /nonexistent/ca.pem"},
		{"cert without key", "      tls:\n        cert_file: " + seedFile + "\n", "consumers[0].nats.tls.key_file: is required with cert_file"},
	} {
		_, err := Parse("bad.yaml", []byte(natsGood+tc.add))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want it to contain %q", tc.name, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "from-env") || strings.Contains(err.Error(), string(seed))) {
			t.Errorf("%s: the error prints a secret: %v", tc.name, err)
		}
	}
}

func TestWebhookTLSValidation(t *testing.T) {
	hook := strings.Replace(good, "http://127.0.0.1:9999/hook", "https://127.0.0.1:9999/hook", 1)
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"missing CA", strings.Replace(hook, "      secret: whsec_c2VjcmV0\n", "      secret: whsec_c2VjcmV0\n      tls: {ca_file: /nonexistent/ca.pem}\n", 1),
			"bad.yaml:14: consumers[0].webhook.tls.ca_file: open /nonexistent/ca.pem"},
		{"http URL", strings.Replace(good, "      secret: whsec_c2VjcmV0\n", "      secret: whsec_c2VjcmV0\n      tls: {insecure_skip_verify: true}\n", 1),
			"consumers[0].webhook.tls: is set, but webhook.url is not https://"},
		{"secret file", strings.Replace(hook, "secret: whsec_c2VjcmV0", "secret: file:/nonexistent/hook-secret", 1),
			"bad.yaml:13: consumers[0].webhook.secret: cannot read secret file: open /nonexistent/hook-secret"},
	} {
		_, err := Parse("bad.yaml", []byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}
