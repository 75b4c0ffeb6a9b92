package nats

import (
	"testing"

	natsgo "github.com/nats-io/nats.go"
)

// The documented default server is the client library's own default.
func TestDefaultURLIsTheClientDefault(t *testing.T) {
	t.Parallel()
	if got := (Config{}).WithDefaults().URL; got != natsgo.DefaultURL {
		t.Errorf("Config default URL %q, nats.go's DefaultURL %q", got, natsgo.DefaultURL)
	}
}
