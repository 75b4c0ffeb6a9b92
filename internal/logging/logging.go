// Package logging builds searchsync's *slog.Logger: tint (coloured, human) on
// a terminal, JSON otherwise, at the configured level.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/lmittmann/tint"
)

// New returns a logger writing to w. format is auto, text or json; level is
// debug, info, warn or error.
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	switch format {
	case "auto", "":
		if isTerminal(w) {
			format = "text"
		} else {
			format = "json"
		}
	case "text", "json":
	default:
		return nil, fmt.Errorf("log format %q is not one of auto, text, json", format)
	}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv})), nil
	}
	return slog.New(tint.NewTextHandler(w, &tint.Options{Level: lv, TimeFormat: time.TimeOnly, NoColor: !isTerminal(w)})), nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
