package compose

// No Docker engine runs in CI, so compose.yaml cannot be started there; this
// test checks what can be checked without it.

import (
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/testenv"
)

type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Build       any               `yaml:"build"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		DependsOn   map[string]any    `yaml:"depends_on"`
		Profiles    []string          `yaml:"profiles"`
		Volumes     []string          `yaml:"volumes"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
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
	connections, err := os.ReadFile("../../docs/connections.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, svc := range c.Services {
		if len(svc.Profiles) > 0 {
			if !strings.Contains(string(connections), "`"+name+"`") {
				t.Errorf("docs/connections.md does not mention compose service %q (profile %v)", name, svc.Profiles)
			}
			continue
		}
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

// The secure profile: Elasticsearch 8 with security and HTTPS on, its CA
// mounted into the relay, whose configuration trusts that CA and takes the
// password from the environment.
func TestComposeSecureProfile(t *testing.T) {
	data, err := os.ReadFile("../../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	es, relay := c.Services["elasticsearch-secure"], c.Services["searchsync-secure"]
	for k, want := range map[string]string{
		"xpack.security.enabled": "true", "xpack.security.http.ssl.enabled": "true", "discovery.type": "single-node",
	} {
		if es.Environment[k] != want {
			t.Errorf("elasticsearch-secure: %s = %q, want %q", k, es.Environment[k], want)
		}
	}
	if es.Environment["ELASTIC_PASSWORD"] == "" || relay.Environment["ELASTIC_PASSWORD"] != es.Environment["ELASTIC_PASSWORD"] {
		t.Errorf("the relay must get the node's ELASTIC_PASSWORD: node %q, relay %q", es.Environment["ELASTIC_PASSWORD"], relay.Environment["ELASTIC_PASSWORD"])
	}
	if _, ok := c.Volumes["es-certs"]; !ok {
		t.Error("volume es-certs is not declared")
	}
	mounted := func(svc, target string) bool {
		for _, v := range c.Services[svc].Volumes {
			if parts := strings.Split(v, ":"); len(parts) >= 2 && parts[0] == "es-certs" && parts[1] == target {
				return true
			}
		}
		return false
	}
	if !mounted("elasticsearch-secure-certs", "/usr/share/elasticsearch/config/certs") || !mounted("elasticsearch-secure", "/usr/share/elasticsearch/config/certs") || !mounted("searchsync-secure", "/certs") {
		t.Errorf("es-certs must be mounted into the certificate job, the node and the relay (/certs)")
	}
	for _, dep := range []string{"elasticsearch-secure", "searchsync-migrate"} {
		if _, ok := relay.DependsOn[dep]; !ok {
			t.Errorf("searchsync-secure must wait for %s", dep)
		}
	}
	if relay.Environment["SEARCHSYNC_CONFIG"] != "/etc/searchsync-secure.yaml" || relay.Environment["SEARCHSYNC_ENGINE_URL"] != "" {
		t.Errorf("searchsync-secure must run examples/compose/secure.yaml without an engine URL override: %v", relay.Environment)
	}

	// The relay's configuration is valid, with a CA where the volume puts it.
	conf, err := os.ReadFile("secure.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const caPath = "/certs/ca/ca.crt"
	if !strings.Contains(string(conf), "ca_file: "+caPath) {
		t.Fatalf("secure.yaml does not trust %s", caPath)
	}
	ca := testenv.NewCA(t, "compose test CA")
	f := t.TempDir() + "/secure.yaml"
	if err := os.WriteFile(f, []byte(strings.Replace(string(conf), caPath, ca.CertFile, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", relay.Environment["DATABASE_URL"])
	t.Setenv("SEARCHSYNC_ENGINE_URL", "")
	t.Setenv("ELASTIC_PASSWORD", "from-compose")
	cfg, err := config.Load(f)
	if err != nil {
		t.Fatalf("examples/compose/secure.yaml: %v", err)
	}
	if cfg.Engine.Kind != "elasticsearch" || cfg.Engine.URLs[0] != "https://elasticsearch-secure:9200" || cfg.Engine.Username != "elastic" {
		t.Errorf("secure.yaml engine: %+v", cfg.Engine)
	}
}
