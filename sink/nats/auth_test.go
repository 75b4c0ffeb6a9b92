package nats_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/internal/secret"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/internal/tlsconf"
	"github.com/searchsync/searchsync/sink/nats"
	"github.com/searchsync/searchsync/sink/nats/natstest"
	"github.com/searchsync/searchsync/sink/sinktest"
)

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// authCase is one way of being let in by a server of the test's own.
type authCase struct {
	srv   *natstest.Server
	good  func(*nats.Config) // the credentials the server accepts
	bad   func(*nats.Config) // wrong ones, of the same method
	key   string             // the key a refusal names
	leaks []string           // secrets no error may print
}

// delivers checks that a consumer with cfg connects and publishes.
func delivers(t *testing.T, cfg nats.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := nats.New(ctx, "queue", cfg, testLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c.Close()
	var g sinktest.Events
	for i, o := range c.Deliver(ctx, g.Make("a", "")) {
		if o.Kind != delivery.OK {
			t.Fatalf("event %d: %s %s", i, o.Kind, o.Reason)
		}
	}
	if err := c.Probe(ctx); err != nil {
		t.Fatalf("probe: %v", err)
	}
}

// refused checks that a consumer with cfg stops at once with a
// *ConfigError naming key, and that no secret shows in it.
func refused(t *testing.T, cfg nats.Config, key string, leaks ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	c, err := nats.New(ctx, "queue", cfg, testLogger(t))
	if err == nil {
		c.Close()
		t.Fatalf("connected with credentials the server refuses")
	}
	var ce *nats.ConfigError
	if !errors.As(err, &ce) || ce.Key != key || !strings.Contains(err.Error(), key) {
		t.Fatalf("error %v, want a *ConfigError naming %s", err, key)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("refusal took %s: it was retried as if the server were down", d)
	}
	for _, s := range leaks {
		if s != "" && strings.Contains(err.Error(), s) {
			t.Errorf("error prints a secret: %v", err)
		}
	}
	t.Logf("refused: %v", err)
}

func cfgFor(t *testing.T, srv *natstest.Server, mod func(*nats.Config)) nats.Config {
	stream, prefix := names(t)
	cfg := nats.Config{URL: srv.URL, Stream: stream, CreateStream: true, Subject: prefix + ".{aggregate_type}.{event_type}"}
	mod(&cfg)
	return cfg
}

func TestAuthMethods(t *testing.T) {
	t.Parallel()
	cases := map[string]func(t *testing.T) authCase{
		"token": func(t *testing.T) authCase {
			const tok = "t0ken-for-searchsync"
			return authCase{
				srv:   natstest.StartConfig(t, fmt.Sprintf("authorization { token: %q }\n", tok), natsgo.Token(tok)),
				good:  func(n *nats.Config) { n.Token = secret.Ref("file:" + writeFile(t, "token", []byte(tok+"\n"))) },
				bad:   func(n *nats.Config) { n.Token = "wrong-t0ken" },
				key:   "nats.token",
				leaks: []string{tok, "wrong-t0ken"},
			}
		},
		"username/password": func(t *testing.T) authCase {
			const pw = "pa55-for-searchsync"
			return authCase{
				srv:   natstest.StartConfig(t, fmt.Sprintf("authorization { users: [{user: searchsync, password: %q}] }\n", pw), natsgo.UserInfo("searchsync", pw)),
				good:  func(n *nats.Config) { n.Username, n.Password = "searchsync", pw },
				bad:   func(n *nats.Config) { n.Username, n.Password = "searchsync", "not-the-pa55" },
				key:   "nats.password",
				leaks: []string{pw, "not-the-pa55"},
			}
		},
		"nkey": func(t *testing.T) authCase {
			user, _ := nkeys.CreateUser()
			pub, _ := user.PublicKey()
			seed, _ := user.Seed()
			other, _ := nkeys.CreateUser()
			otherSeed, _ := other.Seed()
			seedFile := writeFile(t, "user.nk", seed)
			nkOpt, err := natsgo.NkeyOptionFromSeed(seedFile)
			if err != nil {
				t.Fatal(err)
			}
			return authCase{
				srv:   natstest.StartConfig(t, fmt.Sprintf("authorization { users: [{nkey: %q}] }\n", pub), nkOpt),
				good:  func(n *nats.Config) { n.NKeySeedFile = seedFile },
				bad:   func(n *nats.Config) { n.NKeySeedFile = writeFile(t, "other.nk", otherSeed) },
				key:   "nats.nkey_seed_file",
				leaks: []string{string(seed), string(otherSeed)},
			}
		},
		"creds (operator mode)": func(t *testing.T) authCase {
			conf, creds, strangerCreds := operatorMode(t)
			credsFile := writeFile(t, "user.creds", creds)
			return authCase{
				srv:  natstest.StartConfig(t, conf, natsgo.UserCredentials(credsFile)),
				good: func(n *nats.Config) { n.CredsFile = credsFile },
				bad:  func(n *nats.Config) { n.CredsFile = writeFile(t, "stranger.creds", strangerCreds) },
				key:  "nats.creds_file",
			}
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			ac := mk(t)
			delivers(t, cfgFor(t, ac.srv, ac.good))
			refused(t, cfgFor(t, ac.srv, ac.bad), ac.key, ac.leaks...)
			// No credentials at all: the error says which keys exist.
			refused(t, cfgFor(t, ac.srv, func(*nats.Config) {}), "nats", ac.leaks...)
		})
	}
}

// operatorMode makes an operator, a system account and an account with
// JetStream, a user of that account and a user of an account the server
// does not know; it returns the server configuration (memory resolver) and
// both users' credentials files.
func operatorMode(t *testing.T) (conf string, creds, strangerCreds []byte) {
	t.Helper()
	must := func(s string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	op, _ := nkeys.CreateOperator()
	opPub := must(op.PublicKey())
	account := func(name string, js bool) (nkeys.KeyPair, string, string) {
		kp, _ := nkeys.CreateAccount()
		pub := must(kp.PublicKey())
		ac := jwt.NewAccountClaims(pub)
		ac.Name = name
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		return kp, pub, must(ac.Encode(op))
	}
	_, sysPub, sysJWT := account("SYS", false)
	appKP, appPub, appJWT := account("APP", true)
	stranger, _, _ := account("STRANGER", true)
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "searchsync-test"
	oc.SystemAccount = sysPub
	opJWT := must(oc.Encode(op))
	user := func(acct nkeys.KeyPair) []byte {
		u, _ := nkeys.CreateUser()
		uc := jwt.NewUserClaims(must(u.PublicKey()))
		uc.Name = "searchsync"
		seed, _ := u.Seed()
		b, err := jwt.FormatUserConfig(must(uc.Encode(acct)), seed)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	conf = fmt.Sprintf("operator: %s\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n  %s: %s\n  %s: %s\n}\n",
		opJWT, sysPub, sysPub, sysJWT, appPub, appJWT)
	return conf, user(appKP), user(stranger)
}

func TestTLS(t *testing.T) {
	t.Parallel()
	ca := testenv.NewCA(t, "nats test CA")
	srvCert, srvKey := ca.Server(t, "127.0.0.1", "localhost")
	cliCert, cliKey := ca.Client(t, "searchsync")
	conf := fmt.Sprintf("tls {\n  cert_file: %q\n  key_file: %q\n  ca_file: %q\n  verify: true\n  timeout: 5\n}\n", srvCert, srvKey, ca.CertFile)
	srv := natstest.StartConfig(t, conf, natsgo.RootCAs(ca.CertFile), natsgo.ClientCert(cliCert, cliKey))

	delivers(t, cfgFor(t, srv, func(n *nats.Config) {
		n.TLS = tlsconf.Config{CAFile: ca.CertFile, CertFile: cliCert, KeyFile: cliKey}
	}))
	// tls:// asks for TLS in the URL too.
	delivers(t, cfgFor(t, srv, func(n *nats.Config) {
		n.URL = strings.Replace(n.URL, "nats://", "tls://", 1)
		n.TLS = tlsconf.Config{CAFile: ca.CertFile, CertFile: cliCert, KeyFile: cliKey}
	}))

	other := testenv.NewCA(t, "some other CA")
	otherCert, otherKey := other.Client(t, "searchsync")
	for name, tc := range map[string]struct {
		tls  tlsconf.Config
		want string
	}{
		"wrong CA":              {tlsconf.Config{CAFile: other.CertFile, CertFile: cliCert, KeyFile: cliKey}, "nats.tls.ca_file (" + other.CertFile + ")"},
		"no client certificate": {tlsconf.Config{CAFile: ca.CertFile}, "nats.tls.cert_file"},
		"foreign client cert":   {tlsconf.Config{CAFile: ca.CertFile, CertFile: otherCert, KeyFile: otherKey}, "nats.tls.cert_file"},
		"no tls block":          {tlsconf.Config{}, "nats.tls"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := nats.New(ctx, "queue", cfgFor(t, srv, func(n *nats.Config) { n.TLS = tc.tls }), testLogger(t))
			if err == nil {
				c.Close()
				t.Fatal("connected")
			}
			var ce *nats.ConfigError
			if !errors.As(err, &ce) || ce.Key != "nats.tls" || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want a *ConfigError on nats.tls naming %q", err, tc.want)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// Credentials the server stops accepting while the consumer runs are an
// outage: Unavailable with the key in the reason, a failing probe, and
// delivery again once the server accepts the (re-read) secret.
func TestCredentialsRefusedWhileRunning(t *testing.T) {
	t.Parallel()
	conf := func(tok string) string { return fmt.Sprintf("authorization { token: %q }\n", tok) }
	srv := natstest.StartConfig(t, conf("first-t0ken"), natsgo.Token("first-t0ken"))
	tokFile := writeFile(t, "token", []byte("first-t0ken\n"))
	cfg := cfgFor(t, srv, func(n *nats.Config) { n.Token = secret.Ref("file:" + tokFile); n.Timeout = 2 * time.Second })
	ctx := context.Background()
	c, err := nats.New(ctx, "queue", cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var g sinktest.Events
	sinktest.DeliverAll(t, c, g.Make("a"))

	srv.Stop()
	srv.SetConfig(conf("second-t0ken"), natsgo.Token("second-t0ken"))
	srv.Restart()
	testenv.Eventually(t, 30*time.Second, func() bool {
		err := c.Probe(ctx)
		return err != nil && strings.Contains(err.Error(), "refused the credentials of nats.token")
	}, "probe names nats.token once the server refuses it")
	o := c.Deliver(ctx, g.Make("b"))[0]
	if o.Kind != delivery.Unavailable || !strings.Contains(o.Reason, "nats.token") {
		t.Fatalf("refused while running: %v %s, want Unavailable naming nats.token", o.Kind, o.Reason)
	}
	for _, s := range []string{"first-t0ken", "second-t0ken"} {
		if strings.Contains(o.Reason, s) {
			t.Fatalf("reason prints the token: %s", o.Reason)
		}
	}
	t.Logf("unavailable: %s", o.Reason)

	if err := os.WriteFile(tokFile, []byte("second-t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return c.Probe(ctx) == nil }, "probe succeeds with the rotated token file")
	sinktest.DeliverAll(t, c, g.Make("b"))
}
