package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/searchsync/searchsync/dashboard"
	"github.com/searchsync/searchsync/internal/config"
)

// engineInfo describes the engine connection of cfg for status, the
// dashboard and the start-up log (dashboard.EngineOf), nil when no search
// consumer is configured.
func engineInfo(cfg *config.Config) *dashboard.Engine {
	uses := false
	for _, c := range cfg.Consumers {
		uses = uses || c.Type == "search"
	}
	if !uses {
		return nil
	}
	return dashboard.EngineOf(cfg.Engine)
}

// logEngine logs how the engine is reached, and warns about
// insecure_skip_verify.
func logEngine(logger *slog.Logger, cfg *config.Config) {
	info := engineInfo(cfg)
	if info == nil {
		return
	}
	if info.Warning != "" {
		logger.Warn(info.Warning)
	}
	logger.Info("search engine", "kind", info.Kind, "addresses", info.Addresses, "auth", info.Auth, "tls", info.TLS)
}

func printEngine(out io.Writer, info *dashboard.Engine) {
	if info == nil {
		return
	}
	fmt.Fprintf(out, "engine %s %v: auth %s, TLS %s\n", info.Kind, info.Addresses, info.Auth, info.TLS)
	if info.Warning != "" {
		fmt.Fprintln(out, "WARNING:", info.Warning)
	}
	fmt.Fprintln(out)
}
