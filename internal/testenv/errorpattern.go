package testenv

import (
	"regexp"
	"strings"
)

// MatchesError reports whether the console's error pattern (the Filter.Error
// of outbox: * any text, ? one character, case-insensitive, anywhere in
// last_error) selects text, as the ILIKE of outbox's queries does. The
// packages that write reasons hold their patterns to the text with it.
func MatchesError(pattern, text string) bool {
	var b strings.Builder
	b.WriteString("(?is)")
	for _, r := range pattern {
		switch r {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	return regexp.MustCompile(b.String()).MatchString(text)
}
