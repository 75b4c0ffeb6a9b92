package mapping_test

import (
	"context"
	"strings"
	"testing"

	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/projections"
)

// writers returns the fingerprint of a customer projection into alias,
// with extra fields appended to its field list.
func writers(t *testing.T, alias, extra string) *projections.Fingerprint {
	t.Helper()
	set := projections.NewSet()
	yaml := `
projections:
  - name: customer
    event_types: ["entity.customer.*"]
    index: ` + alias + `
    fields:
      - {from: code, type: keyword}
` + extra
	if err := set.AddFile("projections.yaml", []byte(yaml)); err != nil {
		t.Fatal(err)
	}
	return set.Fingerprint(alias)
}

// A projection edited after the index was built is drift, described; the
// definition itself is unchanged.
func TestProjectionDrift(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	eng := engine(t)
	def := testDef(t, eng)
	def.Writers = writers(t, def.Alias, "")

	st, err := mapping.Ensure(ctx, eng, def)
	if err != nil || !st.Created || st.Drift || st.ProjectionsHash != def.Writers.Hash || st.LiveProjectionsHash != def.Writers.Hash {
		t.Fatalf("first ensure: %+v %v", st, err)
	}
	info, err := eng.GetIndex(ctx, st.Index)
	if err != nil {
		t.Fatal(err)
	}
	if live := mapping.LiveProjections(info.Mappings); live == nil || live.Hash != def.Writers.Hash || live.Projections["customer"].Fields["code"] == "" {
		t.Fatalf("_meta of the new index: %s", info.Mappings)
	}

	edited := *def
	edited.Writers = writers(t, def.Alias, "      - {from: after.name, to: full_name, type: text}\n")
	st, err = mapping.Ensure(ctx, eng, &edited)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Drift || st.Created || st.LiveHash != st.Hash || st.LiveProjectionsHash != def.Writers.Hash {
		t.Fatalf("projection drift not reported: %+v", st)
	}
	want := "reindex required: run searchsync reindex " + def.Alias + " (projection customer changed: fields added full_name)"
	if st.Message() != want {
		t.Fatalf("message %q, want %q", st.Message(), want)
	}
	// Nothing was applied: the live index keeps the old fingerprint.
	info, _ = eng.GetIndex(ctx, st.Index)
	if live := mapping.LiveProjections(info.Mappings); live == nil || live.Hash != def.Writers.Hash {
		t.Fatalf("live fingerprint changed: %s", info.Mappings)
	}
	// Without Writers the projections are not compared.
	plain := *def
	plain.Writers = nil
	if st, err := mapping.Check(ctx, eng, &plain); err != nil || st.Drift || st.ProjectionsHash != "" {
		t.Fatalf("check without writers: %+v %v", st, err)
	}
}

// An index created before searchsync recorded the projections (no
// fingerprint in its _meta) is no drift: the first Ensure records the
// current fingerprint, and a later change is drift.
func TestProjectionFingerprintAdopted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	eng := engine(t)
	def := testDef(t, eng)
	if _, err := mapping.Ensure(ctx, eng, def); err != nil { // Writers nil: as an earlier release created it
		t.Fatal(err)
	}
	withWriters := *def
	withWriters.Writers = writers(t, def.Alias, "")
	st, err := mapping.Check(ctx, eng, &withWriters)
	if err != nil || st.Drift || st.LiveProjectionsHash != "" || st.Adopted {
		t.Fatalf("check of an index without a fingerprint: %+v %v", st, err)
	}
	st, err = mapping.Ensure(ctx, eng, &withWriters)
	if err != nil || st.Drift || !st.Adopted || st.AdoptError != "" || st.LiveProjectionsHash != withWriters.Writers.Hash {
		t.Fatalf("ensure did not adopt: %+v %v", st, err)
	}
	info, _ := eng.GetIndex(ctx, st.Index)
	if mapping.LiveHash(info.Mappings) != def.Hash() || mapping.LiveProjections(info.Mappings) == nil {
		t.Fatalf("_meta after adoption: %s", info.Mappings)
	}
	if !strings.Contains(string(info.Mappings), `"alias":"`+def.Alias+`"`) {
		t.Fatalf("alias lost from _meta: %s", info.Mappings)
	}
	st, err = mapping.Ensure(ctx, eng, &withWriters)
	if err != nil || st.Drift || st.Adopted {
		t.Fatalf("second ensure: %+v %v", st, err)
	}
	edited := *def
	edited.Writers = writers(t, def.Alias, "      - {from: after.name, to: full_name, type: text}\n")
	if st, err := mapping.Check(ctx, eng, &edited); err != nil || !st.Drift || len(st.ProjectionChanges) != 1 {
		t.Fatalf("change after adoption: %+v %v", st, err)
	}
}
