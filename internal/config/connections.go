package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/searchsync/searchsync/internal/tlsconf"
	"github.com/searchsync/searchsync/sink/nats"
)

// tls checks a tls block (reading its files) under key.
func (v *validator) tls(key string, c tlsconf.Config) {
	err := c.Validate(key)
	if err == nil {
		return
	}
	for _, err := range unjoin(err) {
		var te *tlsconf.Error
		if errors.As(err, &te) {
			v.add(te.Key, te.Reason)
		} else {
			v.add(key, err.Error())
		}
	}
}

// natsAuth checks a NATS consumer's credentials (key is consumers[i].nats):
// one method at most, both halves of username/password, secrets that
// resolve (when the command reads them, see Secrets), files that hold what
// they should, and the tls block.
func (v *validator) natsAuth(c *Config, key string, n nats.Config) {
	methods := n.AuthMethods()
	if u, err := url.Parse(n.URL); err == nil && u.User != nil {
		v.add(key+".url", "must not hold credentials: set nats.username and nats.password, or nats.token")
	}
	if len(methods) > 1 {
		v.add(key, fmt.Sprintf("sets %s: choose one auth method of creds_file, nkey_seed_file, token, username/password", strings.Join(methods, " and ")))
	}
	switch {
	case n.Username != "" && n.Password == "":
		v.add(key+".password", "is required with nats.username")
	case n.Username == "" && n.Password != "":
		v.add(key+".username", "is required with nats.password")
	}
	c.checkSecret(v, SecretsConsumers, key+".password", n.Password)
	c.checkSecret(v, SecretsConsumers, key+".token", n.Token)
	if n.CredsFile != "" {
		if err := checkCreds(n.CredsFile); err != nil {
			v.add(key+".creds_file", err.Error())
		}
	}
	if n.NKeySeedFile != "" {
		if err := checkSeed(n.NKeySeedFile); err != nil {
			v.add(key+".nkey_seed_file", err.Error())
		}
	}
	if !n.TLS.IsZero() {
		v.tls(key+".tls", n.TLS)
	}
}

// checkCreds reads a credentials file: a user JWT and a user seed. Errors
// name the file, never its contents.
func checkCreds(file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	tok, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return fmt.Errorf("%s holds no user JWT (a file that `nsc generate creds` writes)", file)
	}
	if _, err := jwt.DecodeUserClaims(tok); err != nil {
		return fmt.Errorf("%s holds no user JWT (a file that `nsc generate creds` writes): %w", file, err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(b)
	if err != nil {
		return fmt.Errorf("%s holds no user nkey seed", file)
	}
	kp.Wipe()
	return nil
}

// checkSeed reads an nkey seed file: one user seed (SU…).
func checkSeed(file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return fmt.Errorf("%s holds no nkey seed", file)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil || !strings.HasPrefix(pub, "U") {
		return fmt.Errorf("%s holds a seed, but not a user seed (SU…)", file)
	}
	if _, err := kp.Seed(); err != nil {
		return fmt.Errorf("%s holds a public key, not a seed", file)
	}
	return nil
}
