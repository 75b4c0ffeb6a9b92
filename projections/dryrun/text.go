package dryrun

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// WriteText prints the report for a terminal: per search consumer the
// upcast, the result, the current document, the write, or the error.
func (rep *Report) WriteText(w io.Writer) {
	e := rep.Event
	fmt.Fprintf(w, "event")
	if e.ID != 0 {
		fmt.Fprintf(w, " %d", e.ID)
	}
	agg := "-"
	if e.AggregateID != nil {
		agg = e.AggregateID.String()
	}
	fmt.Fprintf(w, "  %s  %s/%s  schema_version %d", e.EventType, e.AggregateType, agg, e.SchemaVersion)
	if e.TenantID != nil {
		fmt.Fprintf(w, "  tenant_id %s", e.TenantID)
	}
	fmt.Fprintln(w)
	if len(rep.Routed) == 0 {
		fmt.Fprintln(w, "no route takes this event: no consumer sees it")
		return
	}
	fmt.Fprintf(w, "routed to: %s\n", strings.Join(rep.Routed, ", "))
	if len(rep.Consumers) == 0 {
		fmt.Fprintln(w, "no search consumer among them: nothing is projected")
	}
	for i := range rep.Consumers {
		rep.Consumers[i].writeText(w)
	}
}

func (cr *ConsumerReport) writeText(w io.Writer) {
	fmt.Fprintf(w, "\n%s (search consumer of %s)\n", cr.Consumer, strings.Join(cr.Indexes, ", "))
	if cr.Skipped != "" {
		fmt.Fprintf(w, "  skipped: %s\n", cr.Skipped)
		return
	}
	if u := cr.Upcast; u != nil {
		if u.From == u.To {
			fmt.Fprintf(w, "  payload: schema_version %d (the newest: no upcaster runs)\n", u.From)
		} else {
			fmt.Fprintf(w, "  upcast: schema_version %d → %d\n", u.From, u.To)
		}
		fmt.Fprintf(w, "    %s\n", compact(u.Payload))
	}
	if r := cr.Result; r != nil {
		state := "full state (replaces the document)"
		if r.Partial {
			state = "partial (merged onto the current document)"
		}
		if r.Op != "index" {
			state = ""
		}
		fmt.Fprintf(w, "  result: projection %s → %s/%s version %d  op %s  %s\n", r.Projection, r.Index, r.ID, r.Version, r.Op, state)
		if r.Doc != nil {
			fmt.Fprintf(w, "    %s\n", compact(r.Doc))
		}
	}
	if c := cr.Current; c != nil {
		switch {
		case c.Error != "":
			fmt.Fprintf(w, "  current: UNREADABLE (%s): folded onto no document\n", c.Error)
		case c.Found:
			fmt.Fprintf(w, "  current (%s): version %d\n    %s\n", c.From, c.Version, compact(c.Doc))
		default:
			fmt.Fprintf(w, "  current (%s): no document\n", c.From)
		}
	}
	if e := cr.Error; e != nil {
		if cr.Result == nil && cr.Projection != "" {
			fmt.Fprintf(w, "  projection: %s\n", cr.Projection)
		}
		at := ""
		if e.Path != "" {
			at = " at " + e.Path
		}
		fmt.Fprintf(w, "  POISON%s (%s): the consumer marks the event failed with\n    %s\n", at, e.Stage, e.Message)
		return
	}
	if wr := cr.Write; wr != nil {
		switch wr.Op {
		case "none":
			fmt.Fprintf(w, "  write: nothing (%s)\n", wr.Step)
		default:
			same := ""
			if wr.SameVersion {
				same = " (external_gte: a snapshot at the document's version)"
			}
			fmt.Fprintf(w, "  write: %s %s/%s version %d%s\n", wr.Op, wr.Alias, wr.ID, wr.Version, same)
		}
		if wr.Doc != nil {
			fmt.Fprintf(w, "    %s\n", compact(wr.Doc))
		}
		if wr.Note != "" {
			fmt.Fprintf(w, "  note: %s\n", wr.Note)
		}
	}
}

func compact(m map[string]any) string {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Sprintf("%v", m)
	}
	return string(b)
}
