package webhook

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/searchsync/searchsync/internal/testenv"
)

// The console's error classes select the endpoint's 4xx answers by
// RequestPattern (dashboard.ErrorClasses); last_error keeps the text.
func TestReasonPatterns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code int
		want bool
	}{
		{http.StatusUnprocessableEntity, true},
		{http.StatusBadRequest, true},
		{http.StatusUnauthorized, true},
		{http.StatusForbidden, true},
		{http.StatusInternalServerError, false},
		{http.StatusServiceUnavailable, false},
	} {
		resp := &http.Response{StatusCode: tc.code, Status: fmt.Sprintf("%d %s", tc.code, http.StatusText(tc.code)), Header: http.Header{}}
		o, _ := classify(resp, "customer code missing")
		if got := testenv.MatchesError(RequestPattern, o.Reason); got != tc.want {
			t.Errorf("%d: %q selected by RequestPattern %q: %v, want %v", tc.code, o.Reason, RequestPattern, got, tc.want)
		}
	}
}
