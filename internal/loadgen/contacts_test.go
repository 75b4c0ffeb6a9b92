package loadgen

import (
	"encoding/json"
	"strings"
	"testing"
)

// checkStream replays a stream and fails when an aggregate's versions do
// not count up from 1, or a relation event names a customer or person that
// is not live at that point; it returns the events by event type.
func checkStream(t *testing.T, next func() (string, json.RawMessage, bool)) map[string]int {
	t.Helper()
	versions := map[string]int64{}
	live := map[string]bool{}
	counts := map[string]int{}
	for {
		typ, payload, ok := next()
		if !ok {
			return counts
		}
		counts[typ]++
		var p struct {
			EntityID string `json:"entity_id"`
			RelID    string `json:"relation_id"`
			Source   string `json:"source_entity_id"`
			Target   string `json:"target_entity_id"`
			Version  int64  `json:"version"`
			After    map[string]any
		}
		if err := json.Unmarshal(payload, &p); err != nil {
			t.Fatal(err)
		}
		id := p.EntityID
		if strings.HasPrefix(typ, "relation.") {
			id = p.RelID
			if !live[p.Source] || !live[p.Target] {
				t.Fatalf("%s of %s names a customer or person that is not live: %s", typ, id, payload)
			}
		}
		if p.Version != versions[id]+1 {
			t.Fatalf("%s of %s: version %d after %d", typ, id, p.Version, versions[id])
		}
		versions[id] = p.Version
		live[id] = !strings.HasSuffix(typ, ".deleted")
	}
}

func TestContactMixRelatesLiveEntities(t *testing.T) {
	g := New(5)
	g.ContactShare = 0.4
	n := 0
	counts := checkStream(t, func() (string, json.RawMessage, bool) {
		if n == 20000 {
			return "", nil, false
		}
		n++
		e := g.Next()
		return e.EventType, e.Payload, true
	})
	for _, typ := range []string{"entity.customer.created", "entity.customer.updated", "entity.customer.deleted",
		"entity.person.created", "entity.person.updated", "entity.person.deleted",
		"relation.customer_contact.created", "relation.customer_contact.updated", "relation.customer_contact.deleted"} {
		if counts[typ] == 0 {
			t.Errorf("no %s in %v", typ, counts)
		}
	}
	if c := counts["entity.customer.created"] + counts["entity.customer.updated"] + counts["entity.customer.deleted"]; c < n/2 {
		t.Errorf("customers are %d of %d events, want most", c, n)
	}
	if len(g.Contacts()) == 0 || len(g.Persons()) == 0 {
		t.Errorf("%d live contacts, %d live persons", len(g.Contacts()), len(g.Persons()))
	}
}

func TestRelationHeavyWorkload(t *testing.T) {
	w := RelationHeavy()
	evs := w.Make()
	if len(evs) != w.Events {
		t.Fatalf("%d events, want %d", len(evs), w.Events)
	}
	i := 0
	counts := checkStream(t, func() (string, json.RawMessage, bool) {
		if i == len(evs) {
			return "", nil, false
		}
		i++
		return evs[i-1].EventType, evs[i-1].Payload, true
	})
	if counts["relation.customer_contact.created"] < w.Contacts || counts["entity.person.created"] < w.Persons {
		t.Errorf("counts %v", counts)
	}
	// The realistic workload stays customers only.
	for _, e := range Realistic().Make() {
		if !strings.HasPrefix(e.EventType, "entity.customer.") {
			t.Fatalf("realistic workload has %s", e.EventType)
		}
	}
}
