package main

import (
	"crypto/subtle"
	"log/slog"
	"net/http"
	"net/http/pprof"

	"github.com/searchsync/searchsync/dashboard"
	"github.com/searchsync/searchsync/internal/secret"
)

// profiling serves Go's profiles under /debug/pprof/ (http.pprof) to
// requests that carry the operator token in the X-Searchsync-Token header;
// others get 401 and a WARN with the path and the client's address (never
// what they sent). The profiles show where a live relay's memory and CPU go
// (docs/memory.md):
//
//	curl -H "X-Searchsync-Token: $TOKEN" localhost:8080/debug/pprof/heap > heap.pb.gz
//	go tool pprof -top heap.pb.gz
func profiling(token secret.Value, logger *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // heap, allocs, goroutine, block, mutex, threadcreate
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get(dashboard.TokenHeader)
		if token.IsZero() || subtle.ConstantTimeCompare([]byte(got), []byte(token.Reveal())) != 1 {
			reason := "wrong token"
			if got == "" {
				reason = "no token"
			}
			logger.Warn("http: profile request refused", "path", r.URL.Path, "client", r.RemoteAddr, "reason", reason)
			http.Error(w, "the operator token (header "+dashboard.TokenHeader+") is missing or wrong", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}
