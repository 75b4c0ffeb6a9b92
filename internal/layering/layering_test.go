package layering

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/searchsync/searchsync"

// rule says that none of pkgs (module-relative import paths; every package
// of the module when all is set, but those under except) reaches a package
// of deny, directly or through others. A deny entry covers the packages
// under it too: "sink" is sink, sink/search, sink/webhook, …
type rule struct {
	name   string
	pkgs   []string
	all    bool
	except []string
	deny   []string
	why    string
}

// lower are the packages everything else is built on: the outbox's data
// model and the events → documents projection, the engine layer (with the
// write path of the documents relations reach, linked), and the shape of
// the background services (internal/background).
var lower = []string{
	"outbox", "delivery", "routing", "migrations", "projections", "indexer", "mapping", "linked",
	"internal/secret", "internal/tlsconf", "internal/logging", "internal/background",
}

// rules are the import layers. docs/lint.md lists them with the depguard
// rules of .golangci.yml, which check the direct imports of each file.
var rules = []rule{
	{
		name: "lower-packages-stay-lower",
		pkgs: lower,
		deny: []string{"outbox/outboxadmin", "relay", "sink", "lag", "reindex", "dashboard", "compaction", "cmd", "internal/config", "internal/metrics", "examples"},
		why: "outbox, delivery, projections, indexer and mapping are what the relay, the consumers, reindex and lag are built on; " +
			"each owns its Config (indexer.Config), which internal/config fills from the file",
	},
	{
		name: "outbox-admin-below-the-operator-views",
		pkgs: []string{"outbox/outboxadmin"},
		deny: []string{"relay", "sink", "lag", "reindex", "dashboard", "compaction", "cmd", "internal/config", "internal/metrics", "examples"},
		why: "the operator admin builds on outbox and routing only; cmd, the console and lag call it, " +
			"and the caller gives it the routing table and indexes built from the configuration",
	},
	{
		name: "packages-own-their-config",
		pkgs: []string{"relay", "compaction", "indexer", "mapping", "reindex", "internal/metrics", "sink/webhook", "sink/nats"},
		deny: []string{"internal/config"},
		why:  "a package owns its Config (defaults in the field comments, WithDefaults, Validate); internal/config maps the YAML onto it and so sits above it",
	},
	{
		name: "sink-is-the-contract",
		pkgs: []string{"sink", "relay"},
		deny: []string{"sink/search", "sink/webhook", "sink/nats", "lag", "reindex", "dashboard", "compaction", "cmd"},
		why:  "the relay drives consumers through sink.Consumer; neither the contract nor the relay knows a consumer, an operator view or a job",
	},
	{
		name: "consumers-below-the-relay",
		pkgs: []string{"sink/webhook", "sink/nats"},
		deny: []string{"relay", "lag", "reindex", "dashboard", "compaction", "cmd"},
		why:  "a consumer is driven by the relay through sink.Consumer and knows nothing of the relay, the operator views or the jobs",
	},
	{
		name: "compaction-stands-alone",
		pkgs: []string{"compaction"},
		deny: []string{"relay", "sink", "lag", "reindex", "dashboard", "indexer", "mapping", "projections", "cmd"},
		why:  "compaction trims the outbox table and needs nothing of the data path",
	},
	{
		name: "metrics-fed-by-callbacks",
		pkgs: []string{"internal/metrics"},
		deny: []string{"relay", "reindex", "lag", "dashboard", "cmd"},
		why:  "metrics is fed metrics.Batch and a partitions callback, not the packages it measures",
	},
	{
		name: "dual-writes-through-an-interface",
		pkgs: []string{"sink/search"},
		deny: []string{"reindex"},
		why:  "the search consumer reaches the reindex's targets through search.DualWrites, filled by cmd with reindex.NewTargets",
	},
	{
		name:   "config-is-read-by-cmd-alone",
		all:    true,
		except: []string{"cmd", "internal/config", "e2e"},
		deny:   []string{"internal/config"},
		why:    "internal/config maps the YAML onto the packages' own Configs (indexer.Config, relay.Config, lag.Consumer, …); only the binary reads it",
	},
	{
		name: "backfill-below-the-operator-views",
		pkgs: []string{"backfill"},
		deny: []string{"relay", "sink", "lag", "reindex", "dashboard", "compaction", "cmd", "internal/config", "internal/metrics", "examples", "projections", "indexer", "mapping"},
		why:  "backfill writes snapshot events through the producer API (outbox, routing, internal/jobrow); reindex and the console build on it, never the reverse",
	},
	{
		name: "jobrow-is-a-leaf",
		pkgs: []string{"internal/jobrow"},
		deny: []string{"outbox", "delivery", "routing", "migrations", "projections", "indexer", "mapping", "relay", "sink", "lag", "backfill", "reindex", "dashboard", "compaction", "cmd", "internal/config", "internal/metrics", "examples"},
		why:  "internal/jobrow owns the aa_job row lifecycle that backfill and reindex are built on; it imports only pgx, uuid and the standard library",
	},
	{
		name:   "only-cmd-wires-the-examples",
		all:    true,
		except: []string{"cmd", "examples", "e2e"},
		deny:   []string{"examples", "cmd"},
		why:    "the examples are demo data a user opts into; cmd passes them in (its builtinExamples)",
	},
}

// pkg is one package of the module: its direct imports and all its
// dependencies (go list's Imports and Deps), module-relative.
type pkg struct {
	imports []string
	deps    []string
}

// TestImportLayers runs go list -deps on the module (non-test code) and
// fails for every package that reaches one its rule denies, naming the
// chain of imports that gets there.
func TestImportLayers(t *testing.T) {
	t.Parallel()
	graph := listModule(t)
	for _, r := range rules {
		for _, p := range append(slices.Clone(r.pkgs), r.except...) {
			if !covers(graph, p) {
				t.Errorf("rule %s names %s, which is no package of the module: update the rule", r.name, p)
			}
		}
	}
	for _, v := range check(graph, rules) {
		t.Error(v)
	}
}

// TestCheckFindsTransitiveImports shows the check catching what depguard
// cannot: a lower package that reaches a higher one through a middle one.
func TestCheckFindsTransitiveImports(t *testing.T) {
	t.Parallel()
	graph := map[string]pkg{
		"indexer":         {imports: []string{"internal/config"}, deps: []string{"internal/config", "relay", "sink"}},
		"internal/config": {imports: []string{"relay"}, deps: []string{"relay", "sink"}},
		"relay":           {imports: []string{"sink"}, deps: []string{"sink"}},
		"sink":            {},
	}
	got := check(graph, []rule{{name: "r", pkgs: []string{"indexer"}, deny: []string{"sink"}, why: "because"}})
	want := "r: indexer reaches sink (indexer → internal/config → relay → sink): because"
	if len(got) != 1 || got[0] != want {
		t.Fatalf("check = %q, want [%q]", got, want)
	}
}

// check returns one line per package that reaches a package a rule denies.
func check(graph map[string]pkg, rules []rule) []string {
	names := make([]string, 0, len(graph))
	for n := range graph {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []string
	for _, r := range rules {
		for _, p := range names {
			if !r.applies(p) {
				continue
			}
			for _, d := range graph[p].deps {
				if d == p || !slices.ContainsFunc(r.deny, func(x string) bool { return under(d, x) }) {
					continue
				}
				out = append(out, r.name+": "+p+" reaches "+d+" ("+strings.Join(chain(graph, p, d), " → ")+"): "+r.why)
			}
		}
	}
	return out
}

func (r rule) applies(p string) bool {
	if r.all {
		return !slices.ContainsFunc(r.except, func(x string) bool { return under(p, x) })
	}
	return slices.Contains(r.pkgs, p)
}

// under reports whether p is pkg or a package below it.
func under(p, pkg string) bool {
	return p == pkg || strings.HasPrefix(p, pkg+"/")
}

// covers reports whether p names a package of graph or a folder of some.
func covers(graph map[string]pkg, p string) bool {
	for n := range graph {
		if under(n, p) {
			return true
		}
	}
	return false
}

// chain is a shortest import path from p to d through the module's
// packages (breadth first over the direct imports).
func chain(graph map[string]pkg, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if n == to {
			var path []string
			for ; n != ""; n = prev[n] {
				path = append(path, n)
			}
			slices.Reverse(path)
			return path
		}
		for _, m := range graph[n].imports {
			if _, seen := prev[m]; !seen {
				prev[m] = n
				queue = append(queue, m)
			}
		}
	}
	return []string{from, "…", to}
}

// listModule is go list -deps of every package of the module, without
// tests, reduced to the module's own packages.
func listModule(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{"\t"}}{{join .Imports " "}}{{"\t"}}{{join .Deps " "}}`, module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	own := func(paths string) []string {
		var o []string
		for _, p := range strings.Fields(paths) {
			if rel, ok := strings.CutPrefix(p, module+"/"); ok {
				o = append(o, rel)
			}
		}
		return o
	}
	graph := map[string]pkg{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		rel, ok := strings.CutPrefix(f[0], module+"/")
		if !ok {
			continue // the module root, if it ever holds a package
		}
		graph[rel] = pkg{imports: own(f[1]), deps: own(f[2])}
	}
	return graph
}
