// Package logger builds the one [slog.Logger] a service makes in its run
// function and passes to everything it starts.
package logger

import (
	"io"
	"log/slog"
	"strings"
)

// New returns the logger a service builds once in its run function:
// text for people, or JSON when format is "json" (containers), at level
// ("debug", "info", "warn", "error"; default info).
func New(w io.Writer, level, format string) *slog.Logger {
	var lv slog.Level
	switch strings.ToLower(level) {
	case "debug":
		lv = slog.LevelDebug
	case "warn":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	}
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
