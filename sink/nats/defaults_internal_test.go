package nats

import (
	"testing"

	natsgo "github.com/nats-io/nats.go"

	"github.com/searchsync/searchsync/internal/config"
)

// The documented default server is the client library's own default.
func TestDefaultURLIsTheClientDefault(t *testing.T) {
	t.Parallel()
	if got := (config.Nats{}).WithDefaults().URL; got != natsgo.DefaultURL {
		t.Errorf("config.Nats default URL %q, nats.go's DefaultURL %q", got, natsgo.DefaultURL)
	}
}
