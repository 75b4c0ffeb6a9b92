package main

import (
	"strings"
	"testing"

	"github.com/searchsync/searchsync/backfill"
	"github.com/searchsync/searchsync/internal/config"
)

func TestReindexSeedFlag(t *testing.T) {
	cfg := &config.Config{Backfill: config.Backfill{Sources: []backfill.Source{{Name: "customers", Query: "SELECT 1"}}}}
	if src, err := reindexSeed(cfg, "index", false); err != nil || src != nil {
		t.Fatalf("--seed index: %v, %v; want the live index", src, err)
	}
	src, err := reindexSeed(cfg, "source:customers", false)
	if err != nil || src == nil || src.Name != "customers" || src.ChunkSize != backfill.DefaultChunkSize {
		t.Fatalf("--seed source:customers: %+v, %v; want the declared source with its defaults", src, err)
	}
	for _, tc := range []struct {
		seed       string
		clientSeed bool
		want       string
	}{
		{"source:nope", false, `no backfill source "nope"`},
		{"source:", false, "want index or source:<name>"},
		{"live", false, "want index or source:<name>"},
		{"source:customers", true, "--client-seed"},
	} {
		if _, err := reindexSeed(cfg, tc.seed, tc.clientSeed); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--seed %s (client seed %v): %v, want an error with %q", tc.seed, tc.clientSeed, err, tc.want)
		}
	}
}
