package main

import (
	"strings"
	"testing"

	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/sink"
)

// A route to a consumer that was not built is an error that names it.
func TestRelayConfigUnknownConsumer(t *testing.T) {
	t.Parallel()
	c, err := config.Parse("t.yaml", []byte("database: {url: 'postgres://x@h/db'}\nconsumers: [{name: a, type: webhook, webhook: {url: 'http://h/', secret: s}}]\nroutes: [{consumer: a}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relayConfig(c, map[string]sink.Consumer{}, nil); err == nil || !strings.Contains(err.Error(), `unknown consumer "a"`) {
		t.Errorf("unknown consumer: %v", err)
	}
}
