// Package config owns searchsync's configuration file: one YAML file plus
// environment overrides, mapped onto the Configs of the packages it sets up
// and validated at start-up. A bad file stops start-up with one error that
// lists every problem of every stage that could run (decoding, validation,
// the Stages of the command), each with the file, the key (with its line)
// and the reason.
//
// Defaults have one place each. The relay and compaction sections are the
// YAML form of relay.Config and compaction.Config, whose WithDefaults and
// Validate give the defaults and bounds (packages.go maps them and points
// their complaints at the key's line). The engine section is indexer.Config,
// the engine layer's own type, and a consumer's webhook and nats sections
// are webhook.Config and nats.Config; their WithDefaults methods are called
// by Load and by the constructors alike.
package config

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/secret"
	"github.com/searchsync/searchsync/lag"
	"github.com/searchsync/searchsync/sink/nats"
	"github.com/searchsync/searchsync/sink/webhook"
)

// Config is the whole configuration. The zero value of every field means its
// default, given in the field's comment.
type Config struct {
	Database   Database       `yaml:"database"`
	Relay      Relay          `yaml:"relay"`
	HTTP       HTTP           `yaml:"http"`
	Log        Log            `yaml:"log"`
	Compaction Compaction     `yaml:"compaction"`
	Engine     indexer.Config `yaml:"engine"`
	Consumers  []Consumer     `yaml:"consumers"`
	Routes     []Route        `yaml:"routes"`
	Indexes    Indexes        `yaml:"indexes"`
	Backfill   Backfill       `yaml:"backfill"`

	// file is where the configuration came from ("" for defaults only).
	file string
	// ast is the line of every key of the file, used to point errors at a
	// line.
	ast keyLines
	// noDatabase lets database.url be missing (NoDatabase).
	noDatabase bool
	// secrets are the groups of secrets Load reads (Secrets); nil: all.
	secrets map[SecretGroup]bool
	// unread are the keys whose value the decoder could not read (a value
	// of the wrong type), and the keys a misspelt key was probably meant to
	// be: the checks after decoding see their zero value or default, so
	// their complaints about them are left out (validator.add).
	unread map[string]bool
	// stages are the later checks of Stages.
	stages []Stage
}

// SecretGroup is a group of secrets of the configuration that a command
// reads only when it needs them (Secrets).
type SecretGroup int

const (
	// SecretsEngine: engine.password, engine.api_key, engine.bearer_token.
	SecretsEngine SecretGroup = iota + 1
	// SecretsConsumers: the webhook secrets and NATS passwords and tokens.
	SecretsConsumers
	// SecretsOperator: http.operator_token.
	SecretsOperator
)

// Secrets makes Load read only the secrets of groups (none without
// arguments): of the others it checks only that each names a source
// (env:NAME, file:PATH), not that the variable is set or the file readable,
// so that a command that does not use them runs without them. Without this
// option Load reads every secret.
func Secrets(groups ...SecretGroup) Option {
	return func(c *Config) {
		c.secrets = map[SecretGroup]bool{}
		for _, g := range groups {
			c.secrets[g] = true
		}
	}
}

// reads reports whether Load reads the secrets of g.
func (c *Config) reads(g SecretGroup) bool { return c.secrets == nil || c.secrets[g] }

// checkSecret checks the secret r of key: resolved when Load reads group g,
// else only its source named.
func (c *Config) checkSecret(v *validator, g SecretGroup, key string, r secret.Ref) {
	var err error
	if c.reads(g) {
		err = r.Check(key)
	} else {
		err = r.CheckSource(key)
	}
	if err != nil {
		v.add(key, reasonOf(err))
	}
}

// Option changes what Load requires.
type Option func(*Config)

// NoDatabase is for commands that talk to the search engine only (searchsync
// search): database.url may be missing; a given one is still checked.
func NoDatabase() Option { return func(c *Config) { c.noDatabase = true } }

// Database says where the outbox lives.
type Database struct {
	// URL is a PostgreSQL connection string. Env DATABASE_URL overrides it.
	// Required.
	URL string `yaml:"url"`
	// Schema holds the outbox tables. Default "mdm". Env SEARCHSYNC_SCHEMA.
	Schema string `yaml:"schema"`
	// MaxConns bounds the relay's connection pool. Default 10.
	MaxConns int32 `yaml:"max_conns"`
}

// Relay tunes claiming and acknowledging: the YAML form of relay.Config,
// which owns the defaults and bounds repeated here (RelayConfig maps it).
type Relay struct {
	// Partitions spreads aggregates over this many partitions, each owned by
	// one relay at a time. Default 32. Every relay of one database must agree.
	Partitions int `yaml:"partitions"`
	// BatchSize is the most events the first claim takes. Default 500.
	BatchSize int `yaml:"batch_size"`
	// MaxBatchSize is the most events claimed at once while a backlog
	// lasts (each full claim doubles the next one's size up to it).
	// Default 8 × batch_size.
	MaxBatchSize int `yaml:"max_batch_size"`
	// InFlight is the most batches delivered at once while the outbox has a
	// backlog; batches in flight never share an aggregate. Default 2.
	InFlight int `yaml:"in_flight"`
	// PollInterval is the fallback wake-up when no NOTIFY arrives. Default 1s.
	PollInterval time.Duration `yaml:"poll_interval"`
	// LeaseTTL is how long a partition lease lives without a heartbeat.
	// Default 15s.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// MaxAttempts is the number of failed deliveries after which an event
	// becomes failed. Default 10.
	MaxAttempts int `yaml:"max_attempts"`
	// Backoff moves available_at after a failed delivery.
	Backoff Backoff `yaml:"backoff"`
	// Pause says how a paused consumer (one that cannot deliver at all: its
	// engine, endpoint or server is down) is probed.
	Pause Pause `yaml:"pause"`
	// Watermark guards the id order of each aggregate against producers
	// that insert without the aggregate's advisory lock (docs/ordering.md).
	Watermark Watermark `yaml:"watermark"`
}

// Watermark is the visibility watermark: an event with an aggregate is
// claimed only once no transaction can still commit a lower id.
type Watermark struct {
	// Mode is on or off (detect and report out-of-order deliveries only).
	// Default on.
	Mode string `yaml:"mode"`
	// Interval is how often the snapshot is sampled while an id waits.
	// Default 5ms.
	Interval time.Duration `yaml:"interval"`
	// MaxWait bounds the wait for a transaction that holds outbox rows
	// uncommitted. Default 30s.
	MaxWait time.Duration `yaml:"max_wait"`
}

// Pause is the probing of a paused consumer: the first probe after
// ProbeInitial, each next one twice as late, never later than ProbeMax.
type Pause struct {
	// ProbeInitial is the delay before the first probe. Default 1s.
	ProbeInitial time.Duration `yaml:"probe_initial"`
	// ProbeMax caps the delay between probes, so a consumer resumes at most
	// this long after it came back, however long it was away. Default 3s:
	// a probe is one cheap request (a cluster health, a JetStream account
	// info, one webhook batch), and the backlog should move within seconds
	// of the return.
	ProbeMax time.Duration `yaml:"probe_max"`
}

// Backoff is exponential with jitter and a cap.
type Backoff struct {
	// Initial is the first delay. Default 1s.
	Initial time.Duration `yaml:"initial"`
	// Max caps each delay. Default 10m.
	Max time.Duration `yaml:"max"`
	// Multiplier grows the delay per attempt. Default 2.
	Multiplier float64 `yaml:"multiplier"`
	// Jitter is the randomization factor in [0,1). Default 0.2.
	Jitter float64 `yaml:"jitter"`
}

// HTTP is the relay's HTTP listener (metrics, health, dashboard).
type HTTP struct {
	// Listen is host:port. Default "127.0.0.1:8080". Env SEARCHSYNC_HTTP_LISTEN.
	Listen string `yaml:"listen"`
	// SampleInterval is how often the lag figures are read from the outbox
	// (the dashboard's "now", /metrics' gauges). Default 2s.
	SampleInterval time.Duration `yaml:"sample_interval"`
	// HistoryInterval is how often one relay writes a sample of them to
	// aa_console_sample, the console's history. Default 10s.
	HistoryInterval time.Duration `yaml:"history_interval"`
	// HistoryRetention is how long samples are kept. Default 24h.
	HistoryRetention time.Duration `yaml:"history_retention"`
	// DriftInterval is how often the live indexes are compared with the
	// definitions on disk (the console's drift banner and Reindex panel,
	// /api/reindex). Default 30s.
	DriftInterval time.Duration `yaml:"drift_interval"`
	// OperatorToken enables the console's actions (retry, acknowledge):
	// a request must carry it in the X-Searchsync-Token header. A secret
	// (env:NAME, file:PATH). Default none: the console is read-only.
	OperatorToken secret.Ref `yaml:"operator_token"`
	// Pprof serves Go's profiles (heap, goroutines, CPU) under
	// /debug/pprof/ to requests that carry the operator token in the
	// X-Searchsync-Token header, to see where a live relay's memory and CPU
	// go (docs/memory.md). Needs http.operator_token. Default false.
	Pprof bool `yaml:"pprof"`
	// PublicURL is the console's address when a proxy stands in front of
	// it (https://ops.example.com/searchsync): a page served there may run
	// the actions although the proxy forwards neither Host nor
	// X-Forwarded-Host (docs/console.md, "Behind a proxy"). Default none.
	PublicURL string `yaml:"public_url"`
}

// Log configures log/slog output.
type Log struct {
	// Level is debug, info, warn or error. Default info.
	Level string `yaml:"level"`
	// Format is auto (tint on a terminal, JSON otherwise), text or json.
	// Default auto. Env SEARCHSYNC_LOG_FORMAT.
	Format string `yaml:"format"`
}

// Compaction configures the outbox_compact job: the YAML form of
// compaction.Config, which owns the defaults and bounds repeated here
// (CompactionConfig maps it).
type Compaction struct {
	// Retention keeps dispatched events this long after dispatched_at.
	// Default 240h (10 days, the spec's retention).
	Retention time.Duration `yaml:"retention"`
	// Interval between scheduled runs. Default 1h. Negative disables the
	// schedule (on demand only).
	Interval time.Duration `yaml:"interval"`
	// BatchSize is the most rows deleted per statement. Default 1000.
	BatchSize int `yaml:"batch_size"`
}

// Consumer is one delivery target.
type Consumer struct {
	// Name identifies the consumer in routes, last_error and metrics. Required,
	// unique.
	Name string `yaml:"name"`
	// Type is webhook, nats or search. Required.
	Type string `yaml:"type"`
	// Webhook configures a webhook consumer.
	Webhook *webhook.Config `yaml:"webhook"`
	// Nats configures a NATS JetStream consumer.
	Nats *nats.Config `yaml:"nats"`
	// Search configures a search-engine consumer.
	Search *Search `yaml:"search"`
}

// Search writes documents to the engine's indexes.
type Search struct {
	// Indexes names the index definitions this consumer writes (aliases).
	Indexes []string `yaml:"indexes"`
	// StateCache is how many documents' last written state the consumer
	// keeps, so that a partial event continuing a document's version needs
	// no _mget. 0: the default (10,000); -1: no cache.
	StateCache int `yaml:"state_cache"`
	// MaxFanOut bounds the documents one change of an entity brings a new
	// copy of its fields to (relations' other_fields); the rest keep the
	// older copy until a reindex, counted in
	// searchsync_relation_fanout_skipped_total. 0: the default (1,000).
	MaxFanOut int `yaml:"max_fan_out"`
}

// File is where the configuration was read from.
func (c *Config) File() string { return c.file }

// Load reads the file at path (empty: no file, defaults and environment only),
// applies environment overrides and defaults, and validates the result.
//
// The checks run in stages, and one run reports the problems of every stage
// that can run (see check): a YAML syntax error stops there, but a value of
// the wrong type or an unknown key does not stop validation of the rest, nor
// a bad value the Stages after it.
func Load(file string, opts ...Option) (*Config, error) {
	c := newConfig(file, opts)
	var data []byte
	if file != "" {
		var err error
		if data, err = os.ReadFile(file); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
	}
	if err := c.check(data, os.Getenv); err != nil {
		return nil, err
	}
	return c, nil
}

// Parse reads a configuration from bytes (name is used in errors), without
// environment overrides; for tests and embedded examples.
func Parse(name string, data []byte, opts ...Option) (*Config, error) {
	c := newConfig(name, opts)
	if err := c.check(data, nil); err != nil {
		return nil, err
	}
	return c, nil
}

func newConfig(file string, opts []Option) *Config {
	c := &Config{file: file}
	for _, o := range opts {
		o(c)
	}
	return c
}

// check runs the stages on data: decoding (unknown keys, values of the wrong
// type), environment overrides (getenv; nil: none) and defaults,
// validation (which resolves the secrets the command reads and checks the
// routes against the consumers) and the Stages of the options. Each stage
// runs whatever the earlier ones found, on the values they could read; only
// a YAML syntax error ends the run, as nothing of the file can be read then.
// The error lists every problem, in the order of file and line.
func (c *Config) check(data []byte, getenv func(string) string) error {
	v := &validator{c: c}
	if err := c.parse(data, v); err != nil {
		return err
	}
	if getenv != nil {
		c.applyEnv(getenv)
	}
	c.setDefaults()
	c.validate(v)
	for _, s := range c.stages {
		s(c, &Report{v: v})
	}
	return v.err()
}

// parse decodes data into c. The decoder's complaints (unknown keys, values
// of the wrong type) go to v; decoding goes on past them, so the returned
// error is only one that leaves nothing to check: a syntax error.
func (c *Config) parse(data []byte, v *validator) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	const stop = " (a YAML syntax error: nothing else in the file was checked)"
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		// "yaml: line 3: mapping values are not allowed in this context".
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		e := &Error{File: c.file, Reason: msg + stop}
		if sm := typeErrorLine.FindStringSubmatch(msg); sm != nil {
			e.Line, _ = strconv.Atoi(sm[1])
			e.Reason = sm[2] + stop
		}
		return e
	}
	c.ast = keyLines{}
	c.ast.indexNode(&root, "")
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		te, ok := errors.AsType[*yaml.TypeError](err)
		if !ok {
			return &Error{File: c.file, Reason: strings.TrimPrefix(err.Error(), "yaml: ") + " (nothing else in the file was checked)"}
		}
		v.decodeErrors(&root, te.Errors)
	}
	return nil
}

func (c *Config) applyEnv(getenv func(string) string) {
	if v := getenv("DATABASE_URL"); v != "" {
		c.Database.URL = v
	}
	if v := getenv("SEARCHSYNC_SCHEMA"); v != "" {
		c.Database.Schema = v
	}
	if v := getenv("SEARCHSYNC_HTTP_LISTEN"); v != "" {
		c.HTTP.Listen = v
	}
	if v := getenv("SEARCHSYNC_LOG_FORMAT"); v != "" {
		c.Log.Format = v
	}
	if v := getenv("SEARCHSYNC_ENGINE_URL"); v != "" {
		c.Engine.URLs = strings.Split(v, ",")
	}
	if v := getenv("SEARCHSYNC_ENGINE_USERNAME"); v != "" {
		c.Engine.Username = v
	}
	if v := getenv("SEARCHSYNC_ENGINE_PASSWORD"); v != "" {
		c.Engine.Password = secret.Ref(v)
	}
	if v := getenv("SEARCHSYNC_NATS_URL"); v != "" {
		for i := range c.Consumers {
			if c.Consumers[i].Nats != nil {
				c.Consumers[i].Nats.URL = v
			}
		}
	}
}

func (c *Config) setDefaults() {
	c.Database.Schema = cmp.Or(c.Database.Schema, "mdm")
	c.Database.MaxConns = cmp.Or(c.Database.MaxConns, 10)
	c.setPackageDefaults() // relay and compaction: their packages own the defaults
	c.HTTP.Listen = cmp.Or(c.HTTP.Listen, "127.0.0.1:8080")
	c.HTTP.SampleInterval = cmp.Or(c.HTTP.SampleInterval, 2*time.Second)
	c.HTTP.HistoryInterval = cmp.Or(c.HTTP.HistoryInterval, 10*time.Second)
	c.HTTP.HistoryRetention = cmp.Or(c.HTTP.HistoryRetention, 24*time.Hour)
	c.HTTP.DriftInterval = cmp.Or(c.HTTP.DriftInterval, 30*time.Second)
	c.Log.Level = cmp.Or(c.Log.Level, "info")
	c.Log.Format = cmp.Or(c.Log.Format, "auto")
	c.Engine = c.Engine.WithDefaults()
	for i := range c.Consumers {
		if w := c.Consumers[i].Webhook; w != nil {
			*w = w.WithDefaults()
		}
		if n := c.Consumers[i].Nats; n != nil {
			*n = n.WithDefaults()
		}
	}
}

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Validate checks every value and reports all problems at once, each with the
// file, key, line and reason.
func (c *Config) Validate() error {
	v := &validator{c: c}
	c.validate(v)
	return v.err()
}

// consumerNamesUnread matches the keys that, unread, leave the set of
// consumer names incomplete.
var consumerNamesUnread = regexp.MustCompile(`^consumers(\[\d+\](\.name)?)?$`)

func (c *Config) validate(v *validator) {
	if c.Database.URL == "" {
		if !c.noDatabase {
			v.add("database.url", "is required (or set DATABASE_URL)")
		}
	} else if u, err := url.Parse(c.Database.URL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		v.add("database.url", "must be a postgres:// URL")
	}
	if !schemaName.MatchString(c.Database.Schema) {
		v.add("database.schema", fmt.Sprintf("%q is not a plain lower-case identifier", c.Database.Schema))
	}
	if c.Database.MaxConns < 2 {
		v.add("database.max_conns", "must be at least 2")
	}
	c.validatePackages(v) // relay and compaction: their packages own the checks
	c.validateHTTP(v)
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		v.add("log.level", fmt.Sprintf("%q is not one of debug, info, warn, error", c.Log.Level))
	}
	switch c.Log.Format {
	case "auto", "text", "json":
	default:
		v.add("log.format", fmt.Sprintf("%q is not one of auto, text, json", c.Log.Format))
	}
	c.validateEngine(v)
	names := c.validateConsumers(v)
	c.validateRoutes(v, names)
	c.validateIndexes(v)
	c.validateBackfill(v)
}

// validateHTTP checks the http section.
func (c *Config) validateHTTP(v *validator) {
	if _, _, err := splitHostPort(c.HTTP.Listen); err != nil {
		v.add("http.listen", err.Error())
	}
	v.positiveDur("http.sample_interval", c.HTTP.SampleInterval)
	v.positiveDur("http.history_interval", c.HTTP.HistoryInterval)
	v.positiveDur("http.history_retention", c.HTTP.HistoryRetention)
	v.positiveDur("http.drift_interval", c.HTTP.DriftInterval)
	if c.HTTP.HistoryRetention > 0 && c.HTTP.HistoryRetention < c.HTTP.HistoryInterval {
		v.add("http.history_retention", "must not be below http.history_interval")
	}
	c.checkSecret(v, SecretsOperator, "http.operator_token", c.HTTP.OperatorToken)
	if u := c.HTTP.PublicURL; u != "" {
		if _, err := c.HTTP.ParsedPublicURL(); err != nil {
			v.add("http.public_url", err.Error())
		}
	}
	if c.HTTP.Pprof && c.HTTP.OperatorToken == "" {
		v.add("http.pprof", "needs http.operator_token: the profiles are served only to requests that carry it")
	}
}

// validateConsumers checks the consumers and returns their names.
func (c *Config) validateConsumers(v *validator) map[string]bool {
	names := map[string]bool{}
	for i, cons := range c.Consumers {
		key := fmt.Sprintf("consumers[%d]", i)
		switch {
		case cons.Name == "":
			v.add(key+".name", "is required")
		case names[cons.Name]:
			v.add(key+".name", fmt.Sprintf("%q is used by another consumer", cons.Name))
		}
		names[cons.Name] = true
		switch cons.Type {
		case "webhook":
			c.validateWebhook(v, key, cons)
		case "nats":
			c.validateNats(v, key, cons)
		case "search":
			if cons.Search == nil || len(cons.Search.Indexes) == 0 {
				v.add(key+".search.indexes", "names at least one index")
			}
			if cons.Search != nil && cons.Search.MaxFanOut < 0 {
				v.add(key+".search.max_fan_out", fmt.Sprintf("%d is negative (0 is the default, 1000)", cons.Search.MaxFanOut))
			}
		case "":
			v.add(key+".type", "is required (webhook, nats or search)")
		default:
			v.add(key+".type", fmt.Sprintf("%q is not one of webhook, nats, search", cons.Type))
		}
	}
	return names
}

// validateWebhook checks a webhook consumer (key is consumers[i]).
func (c *Config) validateWebhook(v *validator, key string, cons Consumer) {
	if cons.Webhook == nil {
		v.add(key+".webhook", "is required for type webhook")
		return
	}
	v.httpURL(key+".webhook.url", cons.Webhook.URL)
	if cons.Webhook.Secret == "" {
		v.add(key+".webhook.secret", "is required")
	} else if !c.reads(SecretsConsumers) {
		c.checkSecret(v, SecretsConsumers, key+".webhook.secret", secret.Ref(cons.Webhook.Secret))
	} else if val, err := secret.Ref(cons.Webhook.Secret).Resolve(key + ".webhook.secret"); err != nil {
		v.add(key+".webhook.secret", reasonOf(err))
	} else if enc, ok := strings.CutPrefix(val.Reveal(), "whsec_"); ok {
		if _, err := base64.StdEncoding.DecodeString(enc); err != nil || enc == "" {
			v.add(key+".webhook.secret", "a whsec_ secret must be base64 after the prefix (Standard Webhooks)")
		}
	}
	v.positiveDur(key+".webhook.timeout", cons.Webhook.Timeout)
	v.positive(key+".webhook.concurrency", cons.Webhook.Concurrency)
	if !cons.Webhook.TLS.IsZero() {
		v.tls(key+".webhook.tls", cons.Webhook.TLS)
		if !strings.HasPrefix(cons.Webhook.URL, "https://") {
			v.add(key+".webhook.tls", "is set, but webhook.url is not https://")
		}
	}
}

// validateNats checks a NATS consumer (key is consumers[i]).
func (c *Config) validateNats(v *validator, key string, cons Consumer) {
	if cons.Nats == nil {
		v.add(key+".nats", "is required for type nats")
		return
	}
	if cons.Nats.Stream == "" {
		v.add(key+".nats.stream", "is required")
	}
	if !strings.HasPrefix(cons.Nats.URL, "nats://") && !strings.HasPrefix(cons.Nats.URL, "tls://") {
		v.add(key+".nats.url", "must be a nats:// or tls:// URL")
	}
	v.positiveDur(key+".nats.timeout", cons.Nats.Timeout)
	v.positive(key+".nats.max_in_flight", cons.Nats.MaxInFlight)
	switch n := cons.Nats; {
	case n.DuplicateWindow < 2*c.Relay.LeaseTTL:
		v.add(key+".nats.duplicate_window", fmt.Sprintf("%s is shorter than 2 × relay.lease_ttl (%s): a redelivery after a relay crash would not be de-duplicated", n.DuplicateWindow, 2*c.Relay.LeaseTTL))
	case n.MaxAge > 0 && n.MaxAge < n.DuplicateWindow:
		v.add(key+".nats.max_age", fmt.Sprintf("%s is shorter than nats.duplicate_window (%s)", n.MaxAge, n.DuplicateWindow))
	}
	switch cons.Nats.Retention {
	case "limits", "interest", "workqueue":
	default:
		v.add(key+".nats.retention", fmt.Sprintf("%q is not one of limits, interest, workqueue", cons.Nats.Retention))
	}
	v.natsAuth(c, key+".nats", *cons.Nats)
}

// LagConsumers maps consumers onto what the lag read model knows of them.
func LagConsumers(consumers []Consumer) []lag.Consumer {
	out := make([]lag.Consumer, 0, len(consumers))
	for _, c := range consumers {
		lc := lag.Consumer{Name: c.Name, Type: c.Type}
		if c.Search != nil {
			lc.Indexes = c.Search.Indexes
		}
		out = append(out, lc)
	}
	return out
}

// Error is one invalid value.
type Error struct {
	File   string // the configuration file, or a file it names; "" when none
	Key    string // the key, e.g. consumers[1].webhook.url; "" for the file as a whole
	Line   int    // the line in File, 0 when unknown
	Reason string
}

func (e *Error) Error() string {
	loc := cmp.Or(e.File, "configuration")
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", loc, e.Line)
	}
	if e.Key == "" {
		return fmt.Sprintf("%s: %s", loc, e.Reason)
	}
	return fmt.Sprintf("%s: %s: %s", loc, e.Key, e.Reason)
}

// validator collects the problems of every stage of check.
type validator struct {
	c    *Config
	errs []*Error
}

// add reports a problem of key, unless the decoder could not read key or a
// parent of it: then the problem is that of the zero value left in its
// place, and the decoder's complaint says what is wrong.
func (v *validator) add(key, reason string) {
	for k := key; k != ""; k = parentKey(k) {
		if v.c.unread[k] {
			return
		}
	}
	v.errs = append(v.errs, &Error{File: v.c.file, Key: key, Line: v.c.ast.line(key), Reason: reason})
}

// unread marks key as one the decoder could not read (see Config.unread).
func (v *validator) unread(key string) {
	if v.c.unread == nil {
		v.c.unread = map[string]bool{}
	}
	v.c.unread[key] = true
}

// unreadMatch reports whether the decoder could not read a key that re
// matches.
func (c *Config) unreadMatch(re *regexp.Regexp) bool {
	for k := range c.unread {
		if re.MatchString(k) {
			return true
		}
	}
	return false
}

func (v *validator) positive(key string, n int) {
	if n <= 0 {
		v.add(key, "must be positive")
	}
}

func (v *validator) positiveDur(key string, d time.Duration) {
	if d <= 0 {
		v.add(key, "must be a positive duration such as 500ms or 10s")
	}
}

func (v *validator) httpURL(key, s string) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.add(key, fmt.Sprintf("%q is not an absolute http(s) URL", s))
	}
}

// err is every problem, once, in the order of file (the configuration file
// first, then the files it names) and line (those without one last in their
// file); nil when there is none.
func (v *validator) err() error {
	errs := slices.Clone(v.errs)
	slices.SortStableFunc(errs, func(a, b *Error) int {
		return cmp.Or(
			cmp.Compare(fileRank(a.File, v.c.file), fileRank(b.File, v.c.file)),
			strings.Compare(a.File, b.File),
			cmp.Compare(lineRank(a.Line), lineRank(b.Line)))
	})
	var out []error
	for i, e := range errs {
		if i > 0 && *e == *errs[i-1] {
			continue
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

func fileRank(f, main string) int {
	if f == main {
		return 0
	}
	return 1
}

func lineRank(n int) int {
	if n <= 0 {
		return math.MaxInt
	}
	return n
}

// ParsedPublicURL is http.public_url parsed (nil when unset), or why it is
// not the address of a web page.
func (h HTTP) ParsedPublicURL() (*url.URL, error) {
	if h.PublicURL == "" {
		return nil, nil
	}
	u, err := url.Parse(h.PublicURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q is not an http:// or https:// address such as https://ops.example.com/searchsync", h.PublicURL)
	}
	return u, nil
}
