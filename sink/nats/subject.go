package nats

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/searchsync/searchsync/outbox"
)

// The placeholders of a subject template.
const (
	phAggregateType = "{aggregate_type}"
	phEventType     = "{event_type}"
	phTenantID      = "{tenant_id}"
	phAggregateID   = "{aggregate_id}"
)

// emptyToken stands for a value that is absent (a NULL tenant_id or
// aggregate_id) or sanitizes to nothing.
const emptyToken = "_"

// Subject is a parsed subject template such as
// "outbox.{aggregate_type}.{event_type}".
//
// Every placeholder is a whole token. {event_type} expands to the event
// type's own dot-separated segments ("entity.customer.updated" gives three
// tokens), so subscribers can filter on them ("outbox.DDM_ENTITY.entity.customer.>");
// the other placeholders give one token each. Values are sanitized into valid
// tokens: whitespace, control characters, '.', '*' and '>' become '_', and an
// empty or absent value becomes "_".
type Subject struct {
	template string
	tokens   []string // literal tokens or placeholders
}

// ParseSubject checks a subject template: literal tokens must be non-empty
// and free of wildcards and whitespace, placeholders must be known and whole
// tokens, and the template must start with a literal token (the prefix the
// stream's subjects are derived from).
func ParseSubject(template string) (*Subject, error) {
	if template == "" {
		return nil, fmt.Errorf("subject template is empty")
	}
	s := &Subject{template: template, tokens: strings.Split(template, ".")}
	seen := map[string]bool{}
	for i, tok := range s.tokens {
		switch {
		case tok == "":
			return nil, fmt.Errorf("subject template %q has an empty token (at position %d)", template, i+1)
		case isPlaceholder(tok):
			if seen[tok] {
				return nil, fmt.Errorf("subject template %q uses %s twice", template, tok)
			}
			seen[tok] = true
		case strings.ContainsAny(tok, "{}"):
			return nil, fmt.Errorf("subject template %q: token %q is not a literal nor one of %s, %s, %s, %s (placeholders are whole tokens)",
				template, tok, phAggregateType, phEventType, phTenantID, phAggregateID)
		case sanitizeToken(tok) != tok:
			return nil, fmt.Errorf("subject template %q: literal token %q holds a wildcard, a space or a control character", template, tok)
		}
	}
	if isPlaceholder(s.tokens[0]) {
		return nil, fmt.Errorf("subject template %q must start with a literal token such as \"outbox\", from which the stream's subjects are derived", template)
	}
	return s, nil
}

func isPlaceholder(tok string) bool {
	switch tok {
	case phAggregateType, phEventType, phTenantID, phAggregateID:
		return true
	}
	return false
}

// String returns the template.
func (s *Subject) String() string { return s.template }

// Prefix is the template's literal tokens before the first placeholder.
func (s *Subject) Prefix() string {
	var lit []string
	for _, tok := range s.tokens {
		if isPlaceholder(tok) {
			break
		}
		lit = append(lit, tok)
	}
	return strings.Join(lit, ".")
}

// StreamSubject is the subject filter a created stream gets: the prefix
// followed by ">" (or the template itself when it has no placeholder).
func (s *Subject) StreamSubject() string {
	p := s.Prefix()
	if p == s.template {
		return p
	}
	return p + ".>"
}

// Shapes are the wildcard forms of every subject the template can produce,
// used to check that a stream covers them. {event_type} is last: ">";
// elsewhere it stands for two or three tokens (the outbox's event type
// format), so there are two shapes.
func (s *Subject) Shapes() []string {
	shapes := [][]string{nil}
	for i, tok := range s.tokens {
		var alts [][]string
		switch {
		case tok == phEventType && i == len(s.tokens)-1:
			alts = [][]string{{">"}}
		case tok == phEventType:
			alts = [][]string{{"*", "*"}, {"*", "*", "*"}}
		case isPlaceholder(tok):
			alts = [][]string{{"*"}}
		default:
			alts = [][]string{{tok}}
		}
		var next [][]string
		for _, sh := range shapes {
			for _, a := range alts {
				next = append(next, append(append([]string(nil), sh...), a...))
			}
		}
		shapes = next
	}
	out := make([]string, len(shapes))
	for i, sh := range shapes {
		out[i] = strings.Join(sh, ".")
	}
	return out
}

// Render gives the subject of an event.
func (s *Subject) Render(e *outbox.Event) string {
	var b strings.Builder
	for i, tok := range s.tokens {
		if i > 0 {
			b.WriteByte('.')
		}
		switch tok {
		case phAggregateType:
			b.WriteString(sanitizeToken(e.AggregateType))
		case phEventType:
			for j, seg := range strings.Split(e.EventType, ".") {
				if j > 0 {
					b.WriteByte('.')
				}
				b.WriteString(sanitizeToken(seg))
			}
		case phTenantID:
			if e.TenantID != nil {
				b.WriteString(e.TenantID.String())
			} else {
				b.WriteString(emptyToken)
			}
		case phAggregateID:
			if e.AggregateID != nil {
				b.WriteString(e.AggregateID.String())
			} else {
				b.WriteString(emptyToken)
			}
		default:
			b.WriteString(tok)
		}
	}
	return b.String()
}

// sanitizeToken makes v one valid subject token.
func sanitizeToken(v string) string {
	if v == "" {
		return emptyToken
	}
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '*' || r == '>' || unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar {
			return '_'
		}
		return r
	}, v)
}

// covers reports whether every subject matching shape also matches the
// stream subject filter (both may hold '*' and a trailing '>').
func covers(filter, shape string) bool {
	f, s := strings.Split(filter, "."), strings.Split(shape, ".")
	for i, ft := range f {
		if ft == ">" {
			return i < len(s) // '>' needs at least one token
		}
		if i >= len(s) {
			return false
		}
		st := s[i]
		switch {
		case st == ">":
			return false // the shape reaches deeper than a non-'>' filter token
		case ft == "*":
		case ft != st || st == "*":
			return false
		}
	}
	return len(f) == len(s)
}

// uncovered returns the shapes that none of the stream's subjects covers.
func uncovered(streamSubjects, shapes []string) []string {
	var out []string
	for _, sh := range shapes {
		ok := false
		for _, f := range streamSubjects {
			if covers(f, sh) {
				ok = true
				break
			}
		}
		if !ok {
			out = append(out, sh)
		}
	}
	return out
}
