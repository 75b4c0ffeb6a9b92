package indexer

import "testing"

// TestForbiddenHint reads the 403 reasons both engines write: the OpenSearch
// security plugin's and Elasticsearch's (as its security module words them).
func TestForbiddenHint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ kind, reason, want string }{
		{"opensearch", "no permissions for [indices:admin/create] and User [name=reader, backend_roles=[], requestedTenant=null]",
			"user reader lacks the privilege create_index (action indices:admin/create)"},
		{"opensearch", "no permissions for [indices:data/write/bulk[s], indices:data/write/index] and User [name=w, backend_roles=[]]",
			"user w lacks the privilege write (or index) (action indices:data/write/bulk[s], indices:data/write/index)"},
		{"elasticsearch", "action [indices:data/write/bulk[s]] is unauthorized for user [viewer] with effective roles [viewer] on indices [customers_v1], this action is granted by the index privileges [create_doc,create,index,write,all]",
			"user viewer lacks the privilege write (or index) (action indices:data/write/bulk[s]) on customers_v1"},
		{"elasticsearch", "action [indices:admin/aliases] is unauthorized for API key id [VuaCfGcBCdbkQm-e5aOx] of user [svc] on indices [customers], this action is granted by the index privileges [manage,all]",
			"user VuaCfGcBCdbkQm-e5aOx lacks the privilege manage (action indices:admin/aliases) on customers"},
		{"opensearch", "Forbidden", "the engine user lacks a privilege for this request: check its roles"},
	} {
		if got := forbiddenHint(tc.kind, tc.reason); got != tc.want {
			t.Errorf("forbiddenHint(%s, %q)\n got %q\nwant %q", tc.kind, tc.reason, got, tc.want)
		}
	}
}
