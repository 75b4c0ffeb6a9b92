package compose

// No Docker engine runs in CI, so compose.yaml cannot be started there; this
// test checks what can be checked without it.

import (
	"os"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	"github.com/searchsync/searchsync/internal/config"
)

type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Build       any               `yaml:"build"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		DependsOn   map[string]any    `yaml:"depends_on"`
	} `yaml:"services"`
}

func TestComposeFileParsesAndMatchesItsPage(t *testing.T) {
	data, err := os.ReadFile("../../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	page, err := os.ReadFile("../../docs/compose.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range c.Services {
		if !strings.Contains(string(page), "`"+name+"`") {
			t.Errorf("docs/compose.md does not mention compose service %q", name)
		}
	}
	if !strings.HasPrefix(c.Services["postgres"].Image, "postgres:") {
		t.Errorf("postgres service image %q", c.Services["postgres"].Image)
	}
	es := c.Services["elasticsearch"]
	if !strings.HasPrefix(es.Image, "elasticsearch:8.") || es.Environment["xpack.security.enabled"] != "false" || es.Environment["discovery.type"] != "single-node" {
		t.Errorf("elasticsearch service: %+v", es)
	}
	relay := c.Services["searchsync"]
	if relay.Build == nil || len(relay.Command) == 0 || relay.Command[0] != "run" {
		t.Errorf("searchsync service must build the relay and run it: %+v", relay)
	}
	if _, ok := relay.DependsOn["searchsync-migrate"]; !ok {
		t.Errorf("the relay must wait for the migration")
	}
	if c.Services["searchsync-migrate"].Command[0] != "migrate" {
		t.Errorf("searchsync-migrate must run migrate")
	}
	for _, s := range []string{"DATABASE_URL", "SEARCHSYNC_ENGINE_URL"} {
		if relay.Environment[s] == "" {
			t.Errorf("relay environment lacks %s", s)
		}
	}
	// The configuration baked into the image is valid once compose supplies
	// the environment.
	t.Setenv("DATABASE_URL", relay.Environment["DATABASE_URL"])
	t.Setenv("SEARCHSYNC_ENGINE_URL", relay.Environment["SEARCHSYNC_ENGINE_URL"])
	t.Setenv("SEARCHSYNC_HTTP_LISTEN", relay.Environment["SEARCHSYNC_HTTP_LISTEN"])
	cfg, err := config.Load("searchsync.yaml")
	if err != nil {
		t.Fatalf("examples/compose/searchsync.yaml: %v", err)
	}
	if cfg.Engine.Kind != "elasticsearch" {
		t.Errorf("compose relay talks to Elasticsearch, config says %q", cfg.Engine.Kind)
	}
}
