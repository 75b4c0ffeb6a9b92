package reindex

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/projections"
)

// Report is the completeness check of a reindex: the old (live) index and
// the new one compared through the same filter (the alias's: tombstones
// hidden), while live writes go to both.
type Report struct {
	OK     bool   `json:"ok"`
	Source string `json:"source"`
	Target string `json:"target"`
	// GroupBy are the fields counted per value; Groups the counts that
	// differ (all of them when they agree: none).
	GroupBy  []string     `json:"group_by"`
	Groups   []GroupCount `json:"groups"`
	OldTotal int64        `json:"old_total"`
	NewTotal int64        `json:"new_total"`
	// Compared is the number of documents whose id, version and group were
	// compared (every visible document of both indexes).
	Compared int64 `json:"compared"`
	// Missing are in the old index, not the new one; Extra the reverse;
	// Versions have other versions (first 20 of each).
	Missing  []string `json:"missing,omitempty"`
	Extra    []string `json:"extra,omitempty"`
	Versions []string `json:"versions,omitempty"`
	// Sampled documents had their sources compared, ignoring Ignored fields.
	Sampled     int      `json:"sampled"`
	Ignored     []string `json:"ignored,omitempty"`
	SourceDiffs []string `json:"source_diffs,omitempty"`
	Seconds     float64  `json:"seconds"`
	// Owed is how many events of the replay the live consumers had still
	// not delivered when the check began (they had stopped delivering):
	// the live index lacked them, so the counts were bound to differ.
	Owed int64 `json:"owed,omitempty"`
	// SeedSource names the backfill source the target was seeded from
	// (--seed source:<name>); the check then compares counts with it:
	// OldTotal is SourceRows (the rows its query yields now) less
	// SourceLeftOut (the rows the seed read that gave no document of the
	// alias), NewTotal the target's documents through the alias filter.
	SeedSource    string `json:"seed_source,omitempty"`
	SourceRows    int64  `json:"source_rows,omitempty"`
	SourceLeftOut int64  `json:"source_left_out,omitempty"`
}

// GroupCount is the count of one group in both indexes.
type GroupCount struct {
	Key string `json:"key"`
	Old int64  `json:"old"`
	New int64  `json:"new"`
}

// String is the report for a terminal.
func (r *Report) String() string {
	var b strings.Builder
	verdict := "FAILED"
	if r.OK {
		verdict = "ok"
	}
	if r.SeedSource != "" {
		fmt.Fprintf(&b, "completeness check %s: backfill source %s vs %s (new)\n", verdict, r.SeedSource, r.Target)
		fmt.Fprintf(&b, "  source rows now %d, of which %d are no document of this alias: %d documents expected, new has %d\n",
			r.SourceRows, r.SourceLeftOut, r.OldTotal, r.NewTotal)
		if r.Owed > 0 {
			fmt.Fprintf(&b, "  the live consumers had not delivered %d events the replay wrote (is the relay running, a consumer paused?)\n", r.Owed)
		}
		return b.String()
	}
	fmt.Fprintf(&b, "completeness check %s: %s (old) vs %s (new)\n", verdict, r.Source, r.Target)
	fmt.Fprintf(&b, "  documents: old %d, new %d; ids, versions and groups compared: %d\n", r.OldTotal, r.NewTotal, r.Compared)
	if r.Owed > 0 {
		fmt.Fprintf(&b, "  the live consumers had not delivered %d events the replay wrote (is the relay running, a consumer paused?)\n", r.Owed)
	}
	for _, g := range r.Groups {
		fmt.Fprintf(&b, "  count differs for %s=%s: old %d, new %d\n", strings.Join(r.GroupBy, "/"), g.Key, g.Old, g.New)
	}
	list := func(name string, ids []string) {
		if len(ids) > 0 {
			fmt.Fprintf(&b, "  %s: %s\n", name, strings.Join(ids, ", "))
		}
	}
	list("missing in new", r.Missing)
	list("extra in new", r.Extra)
	list("version differs", r.Versions)
	fmt.Fprintf(&b, "  sources compared: %d", r.Sampled)
	if len(r.Ignored) > 0 {
		fmt.Fprintf(&b, " (ignoring %s)", strings.Join(r.Ignored, ", "))
	}
	b.WriteString("\n")
	list("source differs", r.SourceDiffs)
	return b.String()
}

// verify compares source and target. Differences caused by live writes in
// flight are re-read a few times before they count.
func (r *Reindexer) verify(ctx context.Context, source, target string) (*Report, error) {
	start := time.Now()
	rep := &Report{Source: source, Target: target, GroupBy: r.cfg.GroupBy}
	ids, err := r.verifyDocuments(ctx, rep)
	if err != nil {
		return nil, err
	}
	if err := r.verifySample(ctx, rep, ids); err != nil {
		return nil, err
	}
	rep.OK = len(rep.Groups) == 0 && len(rep.Missing) == 0 && len(rep.Extra) == 0 && len(rep.Versions) == 0 && len(rep.SourceDiffs) == 0
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// seenDoc is what the check compares of a visible document: its version
// and its group (the values of the GroupBy fields).
type seenDoc struct {
	version int64
	group   string
}

// verifyDocuments compares every visible document of both indexes, its id,
// version and group, and counts them per group. The two indexes cannot be
// read at one moment while live writes go to both (each refreshes on its
// own, a bulk reaches their shards one after the other), so whatever
// differs is read again, both sides at once and in real time, until it
// agrees or the attempts run out; the counts are those of the documents as
// last read. It records what still differs and returns the ids of the old
// index.
func (r *Reindexer) verifyDocuments(ctx context.Context, rep *Report) ([]string, error) {
	source, target := rep.Source, rep.Target
	if err := r.refresh(ctx, source, target); err != nil {
		return nil, err
	}
	oldS, err := r.states(ctx, source)
	if err != nil {
		return nil, err
	}
	newS, err := r.states(ctx, target)
	if err != nil {
		return nil, err
	}
	rep.Compared = int64(max(len(oldS), len(newS)))
	var diff []string
	for id, st := range oldS {
		if nst, ok := newS[id]; !ok || nst != st {
			diff = append(diff, id)
		}
	}
	for id := range newS {
		if _, ok := oldS[id]; !ok {
			diff = append(diff, id)
		}
	}
	for attempt := 0; len(diff) > 0 && attempt < 10; attempt++ {
		r.log.Debug("reindex: check: documents differ, looking again", "count", len(diff), "attempt", attempt)
		if attempt > 0 {
			if err := sleep(ctx, 300*time.Millisecond); err != nil {
				return nil, err
			}
		}
		var still []string
		for i := 0; i < len(diff); i += 1000 {
			part := diff[i:min(i+1000, len(diff))]
			var o, n map[string]indexer.Doc
			g, gctx := errgroup.WithContext(ctx)
			g.Go(func() (err error) {
				if o, err = r.cfg.Engine.MGet(gctx, source, part); err != nil {
					err = fmt.Errorf("reindex: check: read %s: %w", source, err)
				}
				return err
			})
			g.Go(func() (err error) {
				if n, err = r.cfg.Engine.MGet(gctx, target, part); err != nil {
					err = fmt.Errorf("reindex: check: read %s: %w", target, err)
				}
				return err
			})
			if err := g.Wait(); err != nil {
				return nil, err
			}
			for _, id := range part {
				r.reread(oldS, id, o)
				r.reread(newS, id, n)
				if oldS[id] != newS[id] {
					still = append(still, id)
				}
			}
		}
		diff = still
	}

	rep.Missing, rep.Extra, rep.Versions = nil, nil, nil
	for _, id := range diff {
		ost, oOK := oldS[id]
		nst, nOK := newS[id]
		switch {
		case oOK && !nOK:
			rep.Missing = appendMax(rep.Missing, id)
		case !oOK && nOK:
			rep.Extra = appendMax(rep.Extra, fmt.Sprintf("%s (v%d)", id, nst.version))
		case ost.version != nst.version:
			rep.Versions = appendMax(rep.Versions, fmt.Sprintf("%s (old v%d, new v%d)", id, ost.version, nst.version))
		}
	}
	rep.Groups = groupCounts(oldS, newS)
	rep.OldTotal, rep.NewTotal = int64(len(oldS)), int64(len(newS))
	return slices.Collect(maps.Keys(oldS)), nil
}

// states reads the id, version and group of every visible document of
// index (the alias's filter: tombstones hidden).
func (r *Reindexer) states(ctx context.Context, index string) (map[string]seenDoc, error) {
	out := map[string]seenDoc{}
	var fields []string // no source without groups
	if len(r.cfg.GroupBy) > 0 {
		fields = r.cfg.GroupBy
	}
	if r.lw != nil {
		fields = append(slices.Clone(fields), projections.MetaKey)
	}
	err := r.adm.Scroll(ctx, index, r.cfg.Def.SearchFilter(), 5000, fields, func(_ int64, hits []indexer.ScrollHit) error {
		for _, h := range hits {
			out[h.ID] = seenDoc{version: r.version(h.Version, h.Source), group: r.group(h.Source)}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reindex: check: %w", err)
	}
	return out, nil
}

// reread sets the state of id in states from a real-time read (got): gone
// when the document is missing or a tombstone.
func (r *Reindexer) reread(states map[string]seenDoc, id string, got map[string]indexer.Doc) {
	d, ok := got[id]
	if !ok || r.tombstone(d.Source) {
		delete(states, id)
		return
	}
	states[id] = seenDoc{version: r.version(d.Version, d.Source), group: r.group(d.Source)}
}

// version is the version of a document the check compares: the engine's,
// or in an alias that relations reach (whose engine version counts the
// writes of one index) the sum of the versions of every source kept in the
// document (projections.SourceVersions): any new event of the entity or of
// a relation raises it.
func (r *Reindexer) version(engine int64, src json.RawMessage) int64 {
	if r.lw == nil {
		return engine
	}
	m, err := projections.Decode(src)
	if err != nil {
		return -1
	}
	return projections.SourceVersions(m)
}

// group is the key of a source's group: the values of the GroupBy fields
// (dotted paths) joined with "/", a missing value "" (as GroupCounts keys
// them).
func (r *Reindexer) group(src json.RawMessage) string {
	if len(r.cfg.GroupBy) == 0 {
		return ""
	}
	m, _ := projections.Decode(src)
	parts := make([]string, len(r.cfg.GroupBy))
	for i, f := range r.cfg.GroupBy {
		v, _ := projections.Lookup(m, f)
		switch x := v.(type) {
		case nil:
		case string:
			parts[i] = x
		default:
			b, _ := json.Marshal(x)
			parts[i] = string(b)
		}
	}
	return strings.Join(parts, "/")
}

// groupCounts counts the documents of both sides per group and returns the
// groups whose counts differ, sorted by key.
func groupCounts(oldS, newS map[string]seenDoc) []GroupCount {
	counts := map[string]*GroupCount{}
	count := func(states map[string]seenDoc, side func(*GroupCount) *int64) {
		for _, st := range states {
			g := counts[st.group]
			if g == nil {
				g = &GroupCount{Key: st.group}
				counts[st.group] = g
			}
			*side(g)++
		}
	}
	count(oldS, func(g *GroupCount) *int64 { return &g.Old })
	count(newS, func(g *GroupCount) *int64 { return &g.New })
	var out []GroupCount
	for _, g := range counts {
		if g.Old != g.New {
			out = append(out, *g)
		}
	}
	slices.SortFunc(out, func(a, b GroupCount) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// verifySample compares the sources of a random sample of ids (the fields
// the new definition changes ignored) and records the differences.
func (r *Reindexer) verifySample(ctx context.Context, rep *Report, ids []string) error {
	source, target := rep.Source, rep.Target
	rep.Ignored = append(slices.Clone(r.cfg.IgnoreFields), r.changedFields(ctx, source)...)
	if r.lw != nil {
		// The versions kept for each source are compared as their sum
		// (version); what searches see is compared here.
		rep.Ignored = append(rep.Ignored, projections.MetaKey)
	}
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	sample := ids[:min(len(ids), r.cfg.SampleSize)]
	for attempt := 0; len(sample) > 0 && attempt < 5; attempt++ {
		if attempt > 0 {
			if err := sleep(ctx, 300*time.Millisecond); err != nil {
				return err
			}
		}
		o, err := r.cfg.Engine.MGet(ctx, source, sample)
		if err != nil {
			return fmt.Errorf("reindex: check: read %s: %w", source, err)
		}
		n, err := r.cfg.Engine.MGet(ctx, target, sample)
		if err != nil {
			return fmt.Errorf("reindex: check: read %s: %w", target, err)
		}
		if attempt == 0 {
			rep.Sampled = len(sample)
		}
		var still []string
		rep.SourceDiffs = nil
		last := attempt == 4
		for _, id := range sample {
			od, oOK := o[id]
			nd, nOK := n[id]
			od.Version, nd.Version = r.version(od.Version, od.Source), r.version(nd.Version, nd.Source)
			if !oOK || !nOK || od.Version != nd.Version {
				if oOK != nOK || (oOK && od.Version != nd.Version) {
					still = append(still, id) // a live write in between: look again
					if last {
						rep.SourceDiffs = appendMax(rep.SourceDiffs, fmt.Sprintf("%s: not comparable (old found %v v%d, new found %v v%d)", id, oOK, od.Version, nOK, nd.Version))
					}
				}
				continue
			}
			if d := sourceDiff(od.Source, nd.Source, rep.Ignored); d != "" {
				still = append(still, id)
				rep.SourceDiffs = appendMax(rep.SourceDiffs, id+": "+d)
			}
		}
		sample = still
		r.log.Debug("reindex: check: sampled documents differ, looking again", "count", len(still), "attempt", attempt)
	}
	return nil
}

// refresh refreshes the indexes in one request: one after the other, live
// writes in between would make the later one show more.
func (r *Reindexer) refresh(ctx context.Context, indexes ...string) error {
	if err := r.cfg.Engine.Refresh(ctx, indexes...); err != nil {
		return fmt.Errorf("reindex: refresh %s: %w", strings.Join(indexes, ", "), err)
	}
	return nil
}

func (r *Reindexer) tombstone(src json.RawMessage) bool {
	if r.cfg.Def.DeleteMode != mapping.DeleteSoft || src == nil {
		return false
	}
	var m map[string]any
	if json.Unmarshal(src, &m) != nil {
		return false
	}
	b, _ := m[r.cfg.Def.TombstoneField].(bool)
	return b
}

// changedFields lists the document fields whose mapping differs between the
// live index and the definition (their stored values may differ after a
// re-projection).
func (r *Reindexer) changedFields(ctx context.Context, source string) []string {
	info, err := r.cfg.Engine.GetIndex(ctx, source)
	if err != nil || info == nil {
		return nil
	}
	return mappingChanges(info.Mappings, r.cfg.Def)
}

// mappingChanges compares the live mappings' properties with the
// definition's, field by field (dotted paths).
func mappingChanges(live json.RawMessage, def *mapping.Def) []string {
	var lm map[string]any
	_ = json.Unmarshal(live, &lm)
	var body struct {
		Mappings map[string]any `json:"mappings"`
	}
	_ = json.Unmarshal(def.Body(), &body)
	a, b := map[string]string{}, map[string]string{}
	flattenProps("", lm, a)
	flattenProps("", body.Mappings, b)
	var out []string
	for k, v := range b {
		if a[k] != v {
			out = append(out, k)
		}
	}
	// Fields the live index has and the definition does not were added by
	// dynamic mapping: not a change of the definition.
	slices.Sort(out)
	return out
}

func flattenProps(prefix string, m map[string]any, out map[string]string) {
	props, _ := m["properties"].(map[string]any)
	for name, v := range props {
		fm, _ := v.(map[string]any)
		path := prefix + name
		if sub, ok := fm["properties"].(map[string]any); ok {
			flattenProps(path+".", map[string]any{"properties": sub}, out)
			rest := map[string]any{}
			for k, x := range fm {
				if k != "properties" {
					rest[k] = x
				}
			}
			if len(rest) > 0 {
				b, _ := json.Marshal(canonical(rest))
				out[path] = string(b)
			}
			continue
		}
		b, _ := json.Marshal(canonical(fm))
		out[path] = string(b)
	}
}

// canonical turns numbers and booleans given as strings by the engine into
// strings everywhere, so that "256" and 256 compare equal.
func canonical(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = canonical(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = canonical(e)
		}
		return out
	case nil:
		return nil
	default:
		return fmt.Sprint(x)
	}
}

// settingChanges lists the definition's index settings whose value differs
// from the live index's.
func settingChanges(live json.RawMessage, def *mapping.Def) []string {
	var ls map[string]any
	_ = json.Unmarshal(live, &ls)
	liveIdx, _ := ls["index"].(map[string]any)
	flatLive, flatDef := map[string]string{}, map[string]string{}
	flatten("", liveIdx, flatLive)
	d := map[string]any{}
	for k, v := range def.Settings {
		d[strings.TrimPrefix(k, "index.")] = v
	}
	flatten("", d, flatDef)
	var out []string
	for k, v := range flatDef {
		if flatLive[k] != v {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func flatten(prefix string, m map[string]any, out map[string]string) {
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			flatten(prefix+k+".", sub, out)
			continue
		}
		b, _ := json.Marshal(canonical(v))
		out[prefix+k] = string(b)
	}
}

// sourceDiff names the first top-level field that differs, ignoring
// ignored fields (and their sub-fields); "" when equal.
func sourceDiff(a, b json.RawMessage, ignored []string) string {
	am, err1 := projections.Decode(a)
	bm, err2 := projections.Decode(b)
	if err1 != nil || err2 != nil {
		return "not a JSON object"
	}
	skip := func(k string) bool {
		for _, f := range ignored {
			if f == k || strings.HasPrefix(f, k+".") || strings.HasPrefix(k, f+".") {
				return true
			}
		}
		return false
	}
	keys := map[string]bool{}
	for k := range am {
		keys[k] = true
	}
	for k := range bm {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	slices.Sort(sorted)
	for _, k := range sorted {
		if skip(k) {
			continue
		}
		if !reflect.DeepEqual(am[k], bm[k]) {
			ja, _ := json.Marshal(am[k])
			jb, _ := json.Marshal(bm[k])
			return fmt.Sprintf("field %s: old %s, new %s", k, trunc(string(ja)), trunc(string(jb)))
		}
	}
	return ""
}

func trunc(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}

func appendMax(list []string, s string) []string {
	if len(list) >= 20 {
		return list
	}
	return append(list, s)
}
