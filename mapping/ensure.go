package mapping

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/searchsync/searchsync/indexer"
)

// Status is what Ensure or Check found for one alias.
type Status struct {
	Alias string
	// Index is the physical index the alias points to ("" when missing).
	Index string
	// Created is set when Ensure created the index and alias.
	Created bool
	// Hash is the definition's hash; LiveHash the one in the live index's
	// _meta ("" when the index has none).
	Hash, LiveHash string
	// Drift is set when the live index does not match the definition.
	Drift bool
	// Reason explains the drift.
	Reason string
}

// Message is the operator-facing text of a drift, "" when there is none.
func (s *Status) Message() string {
	if !s.Drift {
		return ""
	}
	return fmt.Sprintf("reindex required: run searchsync reindex %s (%s)", s.Alias, s.Reason)
}

// PhysicalName is the name of generation n of an alias: <alias>_v<n>.
func PhysicalName(alias string, n int) string { return alias + "_v" + strconv.Itoa(n) }

// Generation returns n of a physical name <alias>_v<n>, or 0.
func Generation(alias, index string) int {
	rest, ok := strings.CutPrefix(index, alias+"_v")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 1 {
		return 0
	}
	return n
}

// Check compares the live index behind def's alias with def, changing
// nothing. A missing alias gives a Status with Index "".
func Check(ctx context.Context, eng indexer.Engine, def *Def) (*Status, error) {
	st := &Status{Alias: def.Alias, Hash: def.Hash()}
	targets, err := eng.AliasTargets(ctx, def.Alias)
	if err != nil {
		return nil, fmt.Errorf("mapping: alias %s: %w", def.Alias, err)
	}
	switch len(targets) {
	case 0:
		return st, nil
	case 1:
	default:
		st.Index = strings.Join(targets, ",")
		st.Drift = true
		st.Reason = fmt.Sprintf("alias %s points to %d indexes (%s); a reindex may be in progress", def.Alias, len(targets), st.Index)
		return st, nil
	}
	st.Index = targets[0]
	info, err := eng.GetIndex(ctx, st.Index)
	if err != nil {
		return nil, fmt.Errorf("mapping: index %s: %w", st.Index, err)
	}
	if info == nil {
		return nil, fmt.Errorf("mapping: alias %s points to %s, which does not exist", def.Alias, st.Index)
	}
	st.LiveHash = LiveHash(info.Mappings)
	switch {
	case st.LiveHash == "":
		st.Drift = true
		st.Reason = fmt.Sprintf("index %s has no searchsync hash in _meta; it was not created by searchsync", st.Index)
	case st.LiveHash != st.Hash:
		st.Drift = true
		st.Reason = fmt.Sprintf("definition %s has hash %s, live index %s has %s", def.Source, short(st.Hash), st.Index, short(st.LiveHash))
	}
	return st, nil
}

// LiveHash reads _meta.searchsync.hash from an index's mappings.
func LiveHash(mappings json.RawMessage) string {
	var m struct {
		Meta struct {
			Searchsync struct {
				Hash string `json:"hash"`
			} `json:"searchsync"`
		} `json:"_meta"`
	}
	if json.Unmarshal(mappings, &m) != nil {
		return ""
	}
	return m.Meta.Searchsync.Hash
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// Ensure makes sure def's alias exists: when it is missing it creates the
// first generation <alias>_v1 with the definition and the alias (with the
// soft-delete filter) in one request, so the index never exists without its
// alias. When the alias exists it checks for drift and changes nothing. Safe
// to run from several processes at once: the loser of the creation race
// finds the winner's alias.
func Ensure(ctx context.Context, eng indexer.Engine, def *Def) (*Status, error) {
	for attempt := 0; ; attempt++ {
		st, err := Check(ctx, eng, def)
		if err != nil || st.Index != "" {
			return st, err
		}
		name := PhysicalName(def.Alias, 1)
		err = CreatePhysical(ctx, eng, def, name, true)
		if err == nil {
			st.Index, st.Created, st.LiveHash = name, true, st.Hash
			return st, nil
		}
		if !indexer.IsAlreadyExists(err) {
			return nil, err
		}
		if attempt >= 5 {
			return nil, fmt.Errorf("mapping: index %s exists but alias %s does not point to it: add the alias (POST _aliases) or delete the index", name, def.Alias)
		}
		// Created by another process at the same moment (with its alias):
		// look again.
	}
}

// CreatePhysical creates the physical index name from def; with alias set
// the alias (and its filter) is added in the same request.
func CreatePhysical(ctx context.Context, eng indexer.Engine, def *Def, name string, alias bool) error {
	var body map[string]json.RawMessage
	_ = json.Unmarshal(def.Body(), &body)
	if alias {
		a := map[string]any{}
		if f := def.SearchFilter(); f != nil {
			a["filter"] = f
		}
		b, _ := json.Marshal(map[string]any{def.Alias: a})
		body["aliases"] = b
	}
	raw, _ := json.Marshal(body)
	if err := eng.CreateIndex(ctx, name, raw); err != nil {
		return fmt.Errorf("mapping: create index %s for %s: %w", name, def.Alias, err)
	}
	return nil
}

// NextFree returns the first generation name of alias that does not exist.
func NextFree(ctx context.Context, eng indexer.Engine, alias string) (string, error) {
	return nextFree(ctx, eng, alias)
}

func nextFree(ctx context.Context, eng indexer.Engine, alias string) (string, error) {
	start := 1
	if targets, err := eng.AliasTargets(ctx, alias); err == nil {
		for _, t := range targets {
			start = max(start, Generation(alias, t)+1)
		}
	}
	for n := start; n < start+1000; n++ {
		name := PhysicalName(alias, n)
		info, err := eng.GetIndex(ctx, name)
		if err != nil {
			return "", fmt.Errorf("mapping: look up index %s: %w", name, err)
		}
		if info == nil {
			return name, nil
		}
	}
	return "", fmt.Errorf("mapping: no free generation for %s", alias)
}
