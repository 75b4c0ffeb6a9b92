package mapping

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/projections"
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
	// ProjectionsHash is the fingerprint of the projections that write the
	// index (Def.Writers; "" without), LiveProjectionsHash the one in the
	// live index's _meta ("" when it has none).
	ProjectionsHash, LiveProjectionsHash string
	// ProjectionChanges describe how the projections differ from those
	// that built the live index ("projection customer changed: fields
	// added full_name"); set with Drift.
	ProjectionChanges []string
	// Adopted is set when Ensure recorded the current projections
	// fingerprint in a live index that had none (created before searchsync
	// kept it); AdoptError says why that failed (the index is then checked
	// without it).
	Adopted    bool
	AdoptError string
	// Unlinked is set when relations reach the index (Def.Linked) but the
	// live index was created without the mapping of their per-source
	// versions (projections.MetaKey unindexed): writing them would map
	// every relation's id as a field. A reindex brings the mapping; until
	// then the search consumer refuses to start. Set with Drift.
	Unlinked bool
	// Drift is set when the live index does not match the definition or
	// the projections.
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

// Check compares the live index behind def's alias with def (and, with
// def.Writers, its projections fingerprint), changing nothing. A missing
// alias gives a Status with Index "".
func Check(ctx context.Context, eng indexer.Engine, def *Def) (*Status, error) {
	st := &Status{Alias: def.Alias, Hash: def.Hash()}
	if def.Writers != nil {
		st.ProjectionsHash = def.Writers.Hash
	}
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
		return st, nil
	case st.LiveHash != st.Hash:
		st.Drift = true
		st.Reason = fmt.Sprintf("definition %s has hash %s, live index %s has %s", def.Source, short(st.Hash), st.Index, short(st.LiveHash))
	}
	checkWriters(st, def, info.Mappings)
	if def.Linked() && !linkedMapping(info.Mappings) {
		st.Unlinked, st.Drift = true, true
		st.Reason = strings.Join(append(nonEmpty(st.Reason), fmt.Sprintf(
			"relations reach %s, but index %s was created before they did (no unindexed %s mapping): run `searchsync reindex %s` before relation events are written",
			def.Alias, st.Index, projections.MetaKey, def.Alias)), "; ")
	}
	return st, nil
}

// linkedMapping reports whether an index's mappings hold the unindexed
// object of a linked document's per-source versions.
func linkedMapping(mappings json.RawMessage) bool {
	var m struct {
		Properties map[string]struct {
			Enabled *bool `json:"enabled"`
		} `json:"properties"`
	}
	if json.Unmarshal(mappings, &m) != nil {
		return false
	}
	p, ok := m.Properties[projections.MetaKey]
	return ok && p.Enabled != nil && !*p.Enabled
}

// checkWriters compares the projections fingerprint of def with the one in
// the live index's _meta. An index without one (created before searchsync
// recorded it) is no drift: Ensure records the current one.
func checkWriters(st *Status, def *Def, mappings json.RawMessage) {
	if def.Writers == nil {
		return
	}
	live := LiveProjections(mappings)
	if live == nil {
		return
	}
	st.LiveProjectionsHash = live.Hash
	if live.Hash == def.Writers.Hash {
		return
	}
	st.ProjectionChanges = def.Writers.Changes(live)
	st.Drift = true
	st.Reason = strings.Join(append(nonEmpty(st.Reason), st.ProjectionChanges...), "; ")
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// LiveProjections reads the projections fingerprint (projections_hash and
// projections) from _meta.searchsync of an index's mappings; nil when it
// has none.
func LiveProjections(mappings json.RawMessage) *projections.Fingerprint {
	var m struct {
		Meta struct {
			Searchsync projections.Fingerprint `json:"searchsync"`
		} `json:"_meta"`
	}
	if json.Unmarshal(mappings, &m) != nil || m.Meta.Searchsync.Hash == "" {
		return nil
	}
	return &m.Meta.Searchsync
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
// alias. When the alias exists it checks for drift and changes nothing, but
// for recording the projections fingerprint in an index that has none (see
// the package doc, "Projections"). Safe
// to run from several processes at once: the loser of the creation race
// finds the winner's alias.
func Ensure(ctx context.Context, eng indexer.Engine, def *Def) (*Status, error) {
	for attempt := 0; ; attempt++ {
		st, err := Check(ctx, eng, def)
		if err != nil {
			return nil, err
		}
		if st.Index != "" {
			adopt(ctx, eng, def, st)
			return st, nil
		}
		name := PhysicalName(def.Alias, 1)
		err = CreatePhysical(ctx, eng, def, name, true)
		if err == nil {
			st.Index, st.Created, st.LiveHash, st.LiveProjectionsHash = name, true, st.Hash, st.ProjectionsHash
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

// adopt records def's projections fingerprint in the live index of st
// when the index has a definition hash but no fingerprint: an index created
// before searchsync recorded the projections that write it. They are taken
// to be the current ones (nothing else is known of them); from then on a
// change of them is drift. The rest of _meta.searchsync stays as it is.
func adopt(ctx context.Context, eng indexer.Engine, def *Def, st *Status) {
	if def.Writers == nil || st.LiveHash == "" || st.LiveProjectionsHash != "" || strings.Contains(st.Index, ",") {
		return
	}
	mw, ok := eng.(indexer.MetaWriter)
	if !ok {
		st.AdoptError = fmt.Sprintf("the engine client (%T) cannot write the mapping _meta", eng)
		return
	}
	meta := map[string]any{"alias": def.Alias, "hash": st.LiveHash,
		"projections_hash": def.Writers.Hash, "projections": def.Writers.Projections}
	if err := mw.PutMeta(ctx, st.Index, map[string]any{"searchsync": meta}); err != nil {
		st.AdoptError = err.Error()
		return
	}
	st.Adopted, st.LiveProjectionsHash = true, def.Writers.Hash
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
