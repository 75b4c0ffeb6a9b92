package config

import (
	"errors"

	"github.com/searchsync/searchsync/compaction"
	"github.com/searchsync/searchsync/relay"
)

// The packages a section configures own its defaults and its range checks:
// relay.Config and compaction.Config say each default in the field's comment
// and fill it in their constructor. This file maps the sections onto those
// Configs, so that Load shows the effective values (status, tests) and
// reports an out-of-range value with the file, key and line, before anything
// is built.

// RelayConfig is the relay section (and database.schema) as a relay.Config,
// without routes (they need the built consumers). After Load its values are
// the effective ones; relay.New would fill the same defaults anyway.
func (c *Config) RelayConfig() relay.Config {
	r := c.Relay
	return relay.Config{
		Schema:       c.Database.Schema,
		Partitions:   r.Partitions,
		BatchSize:    r.BatchSize,
		MaxBatchSize: r.MaxBatchSize,
		InFlight:     r.InFlight,
		PollInterval: r.PollInterval,
		LeaseTTL:     r.LeaseTTL,
		MaxAttempts:  r.MaxAttempts,
		Backoff:      relay.Backoff(r.Backoff),
		Pause:        relay.Pause(r.Pause),
		Watermark:    relay.Watermark(r.Watermark),
	}
}

// CompactionConfig is the compaction section (and database.schema) as a
// compaction.Config. After Load its values are the effective ones;
// compaction.New would fill the same defaults anyway.
func (c *Config) CompactionConfig() compaction.Config {
	return compaction.Config{
		Schema:    c.Database.Schema,
		Retention: c.Compaction.Retention,
		BatchSize: c.Compaction.BatchSize,
		Interval:  c.Compaction.Interval,
	}
}

// setPackageDefaults writes the packages' defaults into the relay and
// compaction sections.
func (c *Config) setPackageDefaults() {
	rc := c.RelayConfig().WithDefaults()
	c.Relay = Relay{
		Partitions:   rc.Partitions,
		BatchSize:    rc.BatchSize,
		MaxBatchSize: rc.MaxBatchSize,
		InFlight:     rc.InFlight,
		PollInterval: rc.PollInterval,
		LeaseTTL:     rc.LeaseTTL,
		MaxAttempts:  rc.MaxAttempts,
		Backoff:      Backoff(rc.Backoff),
		Pause:        Pause(rc.Pause),
		Watermark:    Watermark(rc.Watermark),
	}
	cc := c.CompactionConfig().WithDefaults()
	c.Compaction = Compaction{Retention: cc.Retention, Interval: cc.Interval, BatchSize: cc.BatchSize}
}

// validatePackages runs the packages' own checks on the sections and points
// each complaint at its key (relay.backoff.max) and line.
func (c *Config) validatePackages(v *validator) {
	if err := c.RelayConfig().WithDefaults().Validate(); err != nil {
		addPackageErrors(v, "relay", err)
	}
	if err := c.CompactionConfig().WithDefaults().Validate(); err != nil {
		addPackageErrors(v, "compaction", err)
	}
}

// addPackageErrors adds the *relay.ConfigError and *compaction.ConfigError
// of err under section.
func addPackageErrors(v *validator, section string, err error) {
	for _, err := range unjoin(err) {
		if ce, ok := errors.AsType[*relay.ConfigError](err); ok {
			v.add(section+"."+ce.Key, ce.Reason)
		} else if ce, ok := errors.AsType[*compaction.ConfigError](err); ok {
			v.add(section+"."+ce.Key, ce.Reason)
		} else {
			v.add(section, err.Error())
		}
	}
}
