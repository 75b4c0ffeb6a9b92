package indexer

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Amazon OpenSearch Serverless (engine.aws.service: aoss) serves a subset of
// the OpenSearch API, per collection type (AWS: "Supported operations and
// plugins in Amazon OpenSearch Serverless"). An engine configured for it
// keeps to that subset, here and nowhere else:
//
//   - served as on any node: _bulk (ids and external versions in collections
//     of type search only), _mget, _search, _count, index creation, deletion
//     and definition, GET _alias and POST _aliases, PUT <index>/_settings;
//   - Ping: Serverless does not serve the root (GET or HEAD /); it answers
//     404, and that answer is the ping;
//   - WriteBlocks: no cluster state is served and a collection has no blocks
//     a client sets: none, without asking;
//   - WhoAmI: no security plugin to ask: "", without asking;
//   - never sent, an *UnsupportedError instead: _refresh, the cluster state,
//     _cluster/health, the index stats (commit → searchable latency),
//     scrolls, _reindex and tasks. Whatever needs them says so at start-up:
//     reindex refuses to start, the searchable measurement logs one WARN.
//
// Collections of type time series and vector search refuse explicit
// document ids ("Document ID is not supported in create/index operation
// request"); searchsync writes every document under its id with an
// external version, so it needs a collection of type search. The start-up
// access check stops with a *ConfigError that says so, and a bulk item
// refused that way is Unavailable, never poison (documentIDsRefused).

// UnsupportedError is a call of an API that Amazon OpenSearch Serverless
// does not serve; it was not sent. It is neither temporary nor an answer of
// the engine.
type UnsupportedError struct {
	Op  string // what was attempted, e.g. "refresh customers_v1"
	API string // the API the engine lacks, e.g. "_refresh"
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%s: Amazon OpenSearch Serverless (engine.aws.service: aoss) does not serve %s", e.Op, e.API)
}

// IsUnsupported reports whether err is an *UnsupportedError.
func IsUnsupported(err error) bool {
	var ue *UnsupportedError
	return errors.As(err, &ue)
}

// Serverless reports whether eng talks to Amazon OpenSearch Serverless
// (engine.aws.service: aoss) and keeps to the API it serves.
func Serverless(eng Engine) bool {
	e := engineOf(eng)
	return e != nil && e.serverless
}

// isServerless reports whether cfg selects Amazon OpenSearch Serverless.
func isServerless(cfg Config) bool {
	return cfg.AWS != nil && cfg.AWS.Service == "aoss"
}

// serverlessLacks names the API of an Engine request Serverless does not
// serve ("" when it serves it).
func serverlessLacks(a api) string {
	switch a {
	case apiBlocks:
		return "the cluster state (GET /_cluster/state)"
	case apiRefresh:
		return "_refresh"
	case apiAuthenticate:
		return "the security plugin's authinfo"
	}
	return ""
}

// serverlessLacksAdmin is serverlessLacks for Admin requests.
func serverlessLacksAdmin(a adminAPI) string {
	switch a {
	case apiScrollStart, apiScrollNext, apiScrollClear:
		return "the scroll API"
	case apiHealth:
		return "_cluster/health"
	case apiCopy:
		return "_reindex"
	case apiTaskGet, apiTaskCancel:
		return "_tasks"
	case apiRefreshStats:
		return "the index stats (_stats)"
	}
	return ""
}

// documentIDHint explains a refusal of explicit document ids.
const documentIDHint = "the collection refuses explicit document ids, as OpenSearch Serverless collections of type time series " +
	"and vector search do; searchsync writes every document under its id with an external version, which only collections " +
	"of type search allow: point engine.urls at a search collection"

// documentIDsRefused reports whether a bulk item's error is the refusal of
// an explicit document id (Serverless time series and vector search
// collections).
func documentIDsRefused(status int, reason string) bool {
	return status == http.StatusBadRequest && strings.Contains(reason, "Document ID is not supported")
}
