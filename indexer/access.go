package indexer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// pathReq is a bodiless request to a path the opensearchapi package has no
// type for (the security plugin's authinfo).
type pathReq string

func (p pathReq) GetRequest(method string) (*http.Request, error) {
	return http.NewRequest(method, string(p), nil)
}

// explain fills in the Hint of a 401 or 403 answer.
func (e *engine) explain(ee *EngineError) {
	switch ee.Status {
	case http.StatusUnauthorized:
		if e.conn != nil {
			ee.Hint = authHint(e.conn.cfg)
		}
	case http.StatusForbidden:
		ee.Hint = forbiddenHint(e.kind, ee.Reason)
		if e.conn != nil && e.conn.cfg.AuthMethod() == AuthAWS && !osDenied.MatchString(ee.Reason) && !esDenied.MatchString(ee.Reason) {
			// AWS answers 403 to a signature it cannot match and to an
			// IAM principal the access policy does not let in.
			ee.Hint = "with SigV4 a 403 is a signature or access-policy refusal: check engine.aws.region, engine.aws.service, " +
				"the credentials of the chain and the domain's (or collection's data access) policy for that principal"
		}
	}
}

var (
	// OpenSearch: no permissions for [indices:admin/create] and User [name=reader, …]
	osDenied = regexp.MustCompile(`no permissions for \[(.+?)\] and User \[name=([^,\]]+)`)
	// Elasticsearch: action [indices:admin/create] is unauthorized for user [reader] …
	esDenied = regexp.MustCompile(`action \[(.+?)\] is unauthorized for (?:user|API key id) \[([^\]]+)\]`)
	esOn     = regexp.MustCompile(`on indices \[([^\]]+)\]`)
)

// privilegeFor names the index privilege (Elasticsearch) or action group
// (OpenSearch security plugin) that grants an action searchsync uses, ""
// for another action.
func privilegeFor(kind, action string) string {
	os := kind == "opensearch"
	switch {
	case strings.HasPrefix(action, "indices:admin/create"):
		return pick(os, "create_index", "create_index")
	case strings.HasPrefix(action, "indices:admin/aliases/get"), strings.HasPrefix(action, "indices:admin/get"), strings.HasPrefix(action, "indices:admin/mappings/get"):
		return pick(os, "indices_monitor or indices:admin/get, indices:admin/aliases/get", "view_index_metadata")
	case strings.HasPrefix(action, "indices:admin/aliases"):
		return pick(os, "indices:admin/aliases (in manage_aliases)", "manage")
	case strings.HasPrefix(action, "indices:data/write/delete"):
		return pick(os, "delete or write", "delete or write")
	case strings.HasPrefix(action, "indices:data/write"):
		return pick(os, "write (or index)", "write (or index)")
	case strings.HasPrefix(action, "indices:data/read"):
		return pick(os, "read", "read")
	case strings.HasPrefix(action, "indices:admin/refresh"):
		return pick(os, "indices:admin/refresh* (in manage)", "maintenance")
	case strings.HasPrefix(action, "indices:admin/delete"):
		return pick(os, "delete_index", "delete_index")
	case strings.HasPrefix(action, "cluster:monitor/state"):
		return pick(os, "cluster_monitor", "monitor")
	case strings.HasPrefix(action, "indices:monitor/stats"):
		return pick(os, "indices_monitor (or indices:monitor/stats)", "monitor")
	}
	return ""
}

func pick(opensearch bool, os, es string) string {
	if opensearch {
		return os
	}
	return es
}

// forbiddenHint reads a 403's reason for the action, the user and the
// indexes, and names the privilege to grant.
func forbiddenHint(kind, reason string) string {
	action, user := "", ""
	if m := osDenied.FindStringSubmatch(reason); m != nil {
		action, user = m[1], m[2]
	} else if m := esDenied.FindStringSubmatch(reason); m != nil {
		action, user = m[1], m[2]
	}
	if action == "" {
		return "the engine user lacks a privilege for this request: check its roles"
	}
	h := fmt.Sprintf("user %s lacks a privilege that grants the action %s", user, action)
	if p := privilegeFor(kind, action); p != "" {
		h = fmt.Sprintf("user %s lacks the privilege %s (action %s)", user, p, action)
	}
	if m := esOn.FindStringSubmatch(reason); m != nil {
		h += " on " + m[1]
	}
	return h
}

// WhoAmI returns the name the engine knows the configured credentials by
// (the security plugin's authinfo, Elasticsearch's _security/_authenticate),
// or "" when the engine does not say (no security, Serverless, a proxy).
func WhoAmI(ctx context.Context, eng Engine) string {
	if e := engineOf(eng); e != nil {
		return e.whoAmI(ctx)
	}
	return ""
}

func (e *engine) whoAmI(ctx context.Context) string {
	if e.serverless {
		return "" // no security plugin to ask (serverless.go)
	}
	status, body, err := e.s.send(ctx, request{api: apiAuthenticate})
	if err != nil || status != http.StatusOK {
		return ""
	}
	var who struct {
		User     string `json:"user_name"` // OpenSearch
		Username string `json:"username"`  // Elasticsearch
		APIKey   struct {
			Name string `json:"name"`
			ID   string `json:"id"`
		} `json:"api_key"`
	}
	if json.Unmarshal(body, &who) != nil {
		return ""
	}
	name := who.User + who.Username
	if who.APIKey.ID != "" {
		name += fmt.Sprintf(" (API key %s, id %s)", who.APIKey.Name, who.APIKey.ID)
	}
	return name
}

func engineOf(eng Engine) *engine {
	switch x := eng.(type) {
	case *OpenSearch:
		return &x.engine
	case *Elasticsearch:
		return &x.engine
	}
	return nil
}

// AccessError is a start-up check that found the configured credentials
// may not do what searchsync needs on an index or alias.
type AccessError struct {
	Alias     string
	What      string // "write" or "read"
	User      string // "" when the engine does not say
	Privilege string
	Err       error
}

func (e *AccessError) Error() string {
	user := e.User
	if user == "" {
		user = "(the engine does not say which user)"
	}
	return fmt.Sprintf("engine user %s may not %s %s: grant the privilege %s on %s (or an index pattern that covers it, e.g. %s*): %v",
		user, e.What, e.Alias, e.Privilege, e.Alias, e.Alias, e.Err)
}

func (e *AccessError) Unwrap() error { return e.Err }

// ProbeID is the document id the write check updates. It never exists, so
// the update fails with document_missing_exception once authorization
// passed, and nothing is written.
const ProbeID = "_searchsync_access_check"

// CheckAccess checks, for an alias that exists, that the credentials may
// write to it and read from it, without changing it: the write check is a
// bulk update of ProbeID (require_alias, no upsert), which the engine
// authorizes like an index op (the write/index privilege) and then answers
// 404 document_missing_exception; the read check is an _mget of the same
// id. A 401/403 is an *AccessError naming the privilege and the user; any
// other failure is returned as it is (a transport failure stays temporary).
func CheckAccess(ctx context.Context, eng Engine, alias string) error {
	e := engineOf(eng)
	if e == nil {
		return nil
	}
	idJSON, _ := json.Marshal(ProbeID)
	aliasJSON, _ := json.Marshal(alias)
	body := fmt.Sprintf("{\"update\":{\"_index\":%s,\"_id\":%s,\"require_alias\":true}}\n{\"doc\":{}}\n", aliasJSON, idJSON)
	_, b, err := e.do(ctx, "access check: update "+alias+"/"+ProbeID, request{api: apiBulk, body: []byte(body)})
	if err == nil {
		var res struct {
			Items []map[string]struct {
				Status int        `json:"status"`
				Error  *errorBody `json:"error"`
			} `json:"items"`
		}
		if jerr := json.Unmarshal(b, &res); jerr != nil || len(res.Items) != 1 {
			return fmt.Errorf("%s access check of %s: unreadable bulk answer", e.kind, alias)
		}
		for _, it := range res.Items[0] {
			switch {
			case it.Status == http.StatusNotFound && it.Error != nil && it.Error.Type == "document_missing_exception":
			case it.Status < 300:
				// Someone made the probe document; nothing was changed.
			default:
				ee := &EngineError{Op: e.kind + " access check: update " + alias + "/" + ProbeID, Status: it.Status}
				if it.Error != nil {
					ee.Type, ee.Reason = it.Error.Type, it.Error.text()
				}
				if documentIDsRefused(ee.Status, ee.Reason) {
					return &ConfigError{Key: "engine.urls", Err: fmt.Errorf("%w: %s", ee, documentIDHint)}
				}
				e.explain(ee)
				err = ee
			}
		}
	}
	if err := accessError(ctx, e, alias, "write", "indices:data/write/update", err); err != nil {
		return err
	}
	_, err = eng.MGet(ctx, alias, []string{ProbeID})
	return accessError(ctx, e, alias, "read", "indices:data/read/mget", err)
}

func accessError(ctx context.Context, e *engine, alias, what, action string, err error) error {
	ee, ok := AsEngineError(err)
	if !ok || (ee.Status != http.StatusForbidden && ee.Status != http.StatusUnauthorized) {
		return err
	}
	if ee.Status == http.StatusUnauthorized {
		return err // the hint names the credential setting
	}
	if m := osDenied.FindStringSubmatch(ee.Reason); m != nil {
		action = m[1]
	} else if m := esDenied.FindStringSubmatch(ee.Reason); m != nil {
		action = m[1]
	}
	return &AccessError{Alias: alias, What: what, User: e.whoAmI(ctx), Privilege: privilegeFor(e.kind, action), Err: err}
}
