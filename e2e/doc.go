// Package e2e holds the end-to-end tests of searchsync as users run it: the
// searchsync binary built from this module, against the real PostgreSQL,
// OpenSearch, NATS JetStream and HTTP endpoints, with outages made by taking
// those services away (TCP proxies in front of the engine and the endpoint,
// the NATS server stopped). The package has no code of its own.
package e2e
