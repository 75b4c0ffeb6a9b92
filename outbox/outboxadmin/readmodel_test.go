package outboxadmin_test

import (
	"testing"

	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/lag"
)

// Blocked aggregates and what each consumer owes are the lag read model's
// (the one `searchsync outbox status`, `status`, /metrics and the console
// read); the tests of the operator actions check their effect there.

// testConsumers and testRoutes are testRouting as configuration.
var (
	testConsumers = []config.Consumer{{Name: "search", Type: "search"}, {Name: "webhook", Type: "webhook"}}
	testRoutes    = []config.Route{{Consumer: "search", EventTypes: []string{"entity.customer.*"}}, {Consumer: "webhook"}}
)

// readModel reads the lag snapshot of db with the test consumers (none:
// no consumers), listing up to maxListed blocked heads.
func readModel(t *testing.T, db *testenv.DB, consumers bool, maxListed int) *lag.Snapshot {
	t.Helper()
	var cs []config.Consumer
	var rs []config.Route
	if consumers {
		cs, rs = testConsumers, testRoutes
	}
	r := lag.NewReader(db.Pool, db.Schema, config.LagConsumers(cs), config.Routing(cs, rs))
	if maxListed > 0 {
		r.MaxListed = maxListed
	}
	s, err := r.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// consumer is the named consumer of a snapshot.
func consumer(t *testing.T, s *lag.Snapshot, name string) lag.ConsumerLag {
	t.Helper()
	for _, c := range s.Consumers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no consumer %s in %+v", name, s.Consumers)
	return lag.ConsumerLag{}
}
