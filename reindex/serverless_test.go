package reindex

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/projections"
)

// TestReindexRefusedOnServerless: with engine.aws.service aoss a reindex
// refuses to start, before it asks the engine or the database anything,
// with an error that names what Serverless lacks.
func TestReindexRefusedOnServerless(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	proxy := testenv.NewServerlessProxy(t, testenv.SearchCollection)
	eng, err := indexer.New(indexer.Config{Kind: "opensearch", URLs: []string{proxy.URL},
		AWS: &indexer.AWSConfig{Region: "eu-west-1", Service: "aoss"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer indexer.Close(eng)
	defs, err := mapping.Load("")
	if err != nil {
		t.Fatal(err)
	}
	db := testenv.NewDB(t)
	_, err = New(Config{Pool: db.Pool, Engine: eng, Def: defs["customers"], Projections: projections.NewSet()})
	if !errors.Is(err, ErrServerless) || !strings.Contains(err.Error(), "scroll API") {
		t.Fatalf("reindex on Serverless: %v, want ErrServerless", err)
	}
	if r := proxy.Refused(); len(r) != 0 {
		t.Errorf("sent to Serverless: %q", r)
	}
}
