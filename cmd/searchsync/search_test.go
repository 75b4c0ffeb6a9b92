package main

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/searchsync/searchsync/internal/testenv"
)

// TestSearchNeedsNoDatabase runs `searchsync search` with no database
// configured at all: it talks to the engine only.
func TestSearchNeedsNoDatabase(t *testing.T) {
	t.Parallel()
	engineURL := testenv.EngineURL(t)
	index := testenv.Name("search_cli")
	put := func(path, body string) {
		req, _ := http.NewRequest(http.MethodPut, engineURL+path, bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode >= 300 {
			t.Fatalf("PUT %s: %v %v", path, err, resp)
		}
		resp.Body.Close()
	}
	put("/"+index, `{}`)
	t.Cleanup(func() {
		req, _ := http.NewRequest(http.MethodDelete, engineURL+"/"+index, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	put("/"+index+"/_doc/c1?refresh=true", `{"display_name":"Ada Lovelace"}`)

	env := []string{"DATABASE_URL=", "SEARCHSYNC_ENGINE_URL=" + engineURL}
	out, stderr, code := runCLI(t, env, "search", index, "lovelace")
	if code != 0 || !strings.Contains(out, "1 documents match in "+index) || !strings.Contains(out, "c1") {
		t.Fatalf("search without a database: exit %d\n%s\n%s", code, out, stderr)
	}
	// Commands that need the database still say so.
	_, stderr, code = runCLI(t, env, "status")
	if code == 0 || !strings.Contains(stderr, "database.url: is required") {
		t.Fatalf("status without a database: exit %d\n%s", code, stderr)
	}
}
