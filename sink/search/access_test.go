package search_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/secret"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/internal/tlsconf"
	"github.com/searchsync/searchsync/mapping"
)

// securityAPI calls the secured node's security REST API as its admin.
func securityAPI(t *testing.T, method, path string, body any) {
	t.Helper()
	sec := testenv.Secure(t)
	tc, err := tlsconf.Config{CAFile: sec.CAFile}.Build()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	// PUT and DELETE are idempotent: a request a loaded node did not answer
	// within the client's 30 s is sent again, and so is one that met
	// another test's change of the same security configuration (409: the
	// plugin versions each configuration document), for up to 2 minutes.
	var res *http.Response
	for began := time.Now(); ; {
		req, _ := http.NewRequest(method, sec.URL+"/_plugins/_security/api/"+path, bytes.NewReader(b))
		req.SetBasicAuth(sec.AdminUser, sec.AdminPassword)
		req.Header.Set("Content-Type", "application/json")
		res, err = hc.Do(req)
		var ne net.Error
		again := err != nil && errors.As(err, &ne) && ne.Timeout() || err == nil && res.StatusCode == http.StatusConflict
		if !again || time.Since(began) > 2*time.Minute {
			break
		}
		why := fmt.Sprint(err)
		if err == nil {
			why = res.Status
			res.Body.Close()
		}
		t.Logf("%s %s: %s; sending it again", method, path, why)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if b, _ := io.ReadAll(res.Body); res.StatusCode >= 300 && (method != http.MethodDelete || res.StatusCode != http.StatusNotFound) {
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
}

// role is the writer's permissions, with or without the write actions on
// pattern. (The admin actions need "*": the security plugin checks a GET of
// a missing alias against every index.)
func role(pattern string, write bool) map[string]any {
	admin := []string{"indices:admin/create", "indices:admin/delete", "indices:admin/get", "indices:admin/exists",
		"indices:admin/aliases", "indices:admin/aliases/get", "indices:admin/mappings/get", "indices:monitor/settings/get",
		"indices:admin/refresh*", "indices:data/read/get", "indices:data/read/mget*", "indices:data/read/search*"}
	perms := []map[string]any{{"index_patterns": []string{"*"}, "allowed_actions": admin}}
	if write {
		perms = append(perms, map[string]any{"index_patterns": []string{pattern},
			"allowed_actions": []string{"indices:data/write/index", "indices:data/write/delete", "indices:data/write/update", "indices:data/write/bulk*"}})
	}
	return map[string]any{
		"cluster_permissions": []string{"cluster:monitor/main", "cluster:monitor/health", "cluster:monitor/state",
			"indices:data/write/bulk", "indices:data/read/mget", "indices:admin/aliases", "indices:admin/aliases/get"},
		"index_permissions": perms,
	}
}

// TestRevokedWritePrivilege: a consumer of a user of its own delivers;
// then the user's role loses the write actions while it runs. The next
// batch is Unavailable (the relay pauses the consumer; no retry per event)
// with a reason that names the action and the user, and the access check
// says which privilege to grant.
func TestRevokedWritePrivilege(t *testing.T) {
	sec := testenv.Secure(t)
	suffix := make([]byte, 4)
	rand.Read(suffix)
	name := "conn_" + hex.EncodeToString(suffix)
	pw := make([]byte, 16)
	rand.Read(pw)
	password := "Pw-" + hex.EncodeToString(pw)
	alias := testenv.Name("revoke")
	securityAPI(t, http.MethodPut, "roles/"+name, role(alias+"*", true))
	securityAPI(t, http.MethodPut, "internalusers/"+name, map[string]any{"password": password})
	securityAPI(t, http.MethodPut, "rolesmapping/"+name, map[string]any{"users": []string{name}})
	t.Cleanup(func() {
		securityAPI(t, http.MethodDelete, "rolesmapping/"+name, nil)
		securityAPI(t, http.MethodDelete, "internalusers/"+name, nil)
		securityAPI(t, http.MethodDelete, "roles/"+name, nil)
	})

	b := setupOn(t, indexer.Config{URLs: []string{sec.URL}, TLS: tlsconf.Config{CAFile: sec.CAFile},
		Username: name, Password: secret.Ref(password)}, func(d *mapping.Def) { d.Alias = alias })
	if err := b.cons.CheckAccess(b.ctx); err != nil {
		t.Fatalf("access check with the write role: %v", err)
	}
	id := uuid.New()
	b.deliver(b.produce(customer.Created(ch(id, 1, map[string]any{"status": "draft"}))), ok)

	securityAPI(t, http.MethodPut, "roles/"+name, role(alias+"*", false))
	var out []delivery.Outcome
	testenv.Eventually(t, 30*time.Second, func() bool {
		out = b.cons.Deliver(b.ctx, b.produce(customer.Updated(ch(id, 2, map[string]any{"status": "active"}))))
		return out[0].Kind == delivery.Unavailable
	}, "the revoked write privilege never showed")
	for _, want := range []string{"indices:data/write", name, "lacks the privilege write"} {
		if !strings.Contains(out[0].Reason, want) {
			t.Errorf("reason %q lacks %q", out[0].Reason, want)
		}
	}
	t.Logf("unavailable: %s", out[0].Reason)
	err := b.cons.CheckAccess(context.Background())
	t.Logf("access check: %v", err)
	var ae *indexer.AccessError
	if !errors.As(err, &ae) || ae.What != "write" || ae.User != name || !strings.Contains(err.Error(), "grant the privilege write") {
		t.Fatalf("access check after the revocation: %v", err)
	}
}
