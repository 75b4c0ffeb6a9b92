package reindex

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/searchsync/searchsync/mapping"
)

// restoreSettings puts the definition's refresh interval and number of
// replicas back on the target (the engine's defaults where it sets none),
// refreshes it and waits until its health is as good as the live index's
// (green when that is green: every replica allocated).
func (r *Reindexer) restoreSettings(ctx context.Context, source string) error {
	settings := map[string]any{"refresh_interval": defSetting(r.cfg.Def, "refresh_interval")}
	if ownsReplicas(r.cfg.Def) {
		settings["number_of_replicas"] = defSetting(r.cfg.Def, "number_of_replicas")
	}
	// Both at once: the refresh makes every write so far searchable
	// whatever the interval, and the settings update waits for the
	// cluster state, not for the shard.
	t := time.Now()
	var g errgroup.Group
	g.Go(func() error {
		if err := r.adm.PutSettings(ctx, r.target, settings); err != nil {
			return fmt.Errorf("reindex: %w", err)
		}
		r.log.Debug("reindex: settings put back", "ms", time.Since(t).Milliseconds())
		return nil
	})
	g.Go(func() error {
		if err := r.cfg.Engine.Refresh(ctx, r.target); err != nil {
			return fmt.Errorf("reindex: refresh %s: %w", r.target, err)
		}
		r.log.Debug("reindex: target refreshed", "ms", time.Since(t).Milliseconds())
		return nil
	})
	if err := g.Wait(); err != nil {
		return err
	}
	if ownsReplicas(r.cfg.Def) && replicasWanted(r.cfg.Def) == 0 {
		return nil // no replicas to wait for: the primary is active, it was written to
	}
	// Green when the live index is green with at least as many replicas
	// (the cluster can place them), else yellow (every primary). At most
	// replicaWait, then the reindex goes on with what there is, as it did
	// when replicas were built while filling.
	want := "yellow"
	if status, _, err := r.adm.Health(ctx, source, "", 0); err != nil {
		return fmt.Errorf("reindex: %w", err)
	} else if status == "green" {
		if info, err := r.cfg.Engine.GetIndex(ctx, source); err == nil && info != nil && replicasOf(info.Settings) >= replicasWanted(r.cfg.Def) {
			want = "green"
		}
	}
	for waited := time.Duration(0); ; {
		step := min(30*time.Second, replicaWait-waited)
		_, timedOut, err := r.adm.Health(ctx, r.target, want, step)
		if err != nil {
			return fmt.Errorf("reindex: %w", err)
		}
		if !timedOut {
			break
		}
		if waited += step; waited >= replicaWait {
			r.log.Warn("reindex: the new index is not "+want+"; going on", "index", r.target, "waited", waited.String())
			break
		}
		r.log.Warn("reindex: waiting for the replicas of the new index", "index", r.target, "status_wanted", want, "waited", waited.String())
	}
	return nil
}

// checkSettings logs the settings of the target that differ from the
// definition (none should).
func (r *Reindexer) checkSettings(ctx context.Context) {
	if info, err := r.cfg.Engine.GetIndex(ctx, r.target); err == nil && info != nil {
		if diff := settingChanges(info.Settings, r.cfg.Def); len(diff) > 0 {
			r.log.Warn("reindex: settings of the new index differ from the definition", "index", r.target, "settings", strings.Join(diff, ","))
		}
	}
}

// ownsReplicas says whether the reindex may set the target's replicas
// while filling: not when the definition lets the engine choose them
// (auto_expand_replicas).
func ownsReplicas(def *mapping.Def) bool {
	v := defSetting(def, "auto_expand_replicas")
	return v == nil || v == false || v == "false"
}

// replicaWait bounds the wait for the new index's replicas.
var replicaWait = 10 * time.Minute

// replicasOf reads index.number_of_replicas from an index's settings.
func replicasOf(settings json.RawMessage) int {
	var s struct {
		Index struct {
			Replicas string `json:"number_of_replicas"`
		} `json:"index"`
	}
	_ = json.Unmarshal(settings, &s)
	n, _ := strconv.Atoi(s.Index.Replicas)
	return n
}

// replicasWanted is the definition's number of replicas (the engine's
// default, 1, when it sets none).
func replicasWanted(def *mapping.Def) int {
	v := defSetting(def, "number_of_replicas")
	if v == nil {
		return 1
	}
	n, err := strconv.Atoi(fmt.Sprint(v))
	if err != nil {
		return 1
	}
	return n
}

// defSetting is the definition's index setting name (flat, "index."
// prefixed or nested under "index"); nil (the engine's default) when it
// sets none.
func defSetting(def *mapping.Def, name string) any {
	if v, ok := def.Settings[name]; ok {
		return v
	}
	if v, ok := def.Settings["index."+name]; ok {
		return v
	}
	if ix, ok := def.Settings["index"].(map[string]any); ok {
		if v, ok := ix[name]; ok {
			return v
		}
	}
	return nil
}
