// Package accesslog writes the gateway's access log: one line per usage
// record, formatted straight from the record (no log/slog attributes) in
// the bytes log/slog's TextHandler or JSONHandler would write for it at info
// with the message "access".
package accesslog

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"sluice/meter"
)

// Writer writes access lines to an io.Writer. It is safe for concurrent use:
// each line is one Write call, made while no other line of this Writer is
// being written.
type Writer struct {
	w     io.Writer
	json  bool
	level slog.Level
	now   func() time.Time

	mu   sync.Mutex
	pool sync.Pool // *[]byte, a line's buffer
}

// New is a Writer on w in format ("text" or "json", any case) at level
// (an access line is info: a level above it writes nothing). now is the
// clock of the lines' time (nil: time.Now).
func New(w io.Writer, format string, level slog.Level, now func() time.Time) (*Writer, error) {
	var json bool
	switch strings.ToLower(format) {
	case "text":
	case "json":
		json = true
	default:
		return nil, fmt.Errorf("bad --log-format %q (text or json)", format)
	}
	if now == nil {
		now = time.Now
	}
	return &Writer{w: w, json: json, level: level, now: now, pool: sync.Pool{New: func() any {
		b := make([]byte, 0, 1024)
		return &b
	}}}, nil
}

// Enabled reports whether the Writer writes lines (its level is info or
// below).
func (w *Writer) Enabled() bool { return w.level <= slog.LevelInfo }

// Log writes rec's line, or nothing when the Writer is not Enabled. A write
// error is dropped, as log/slog's Logger drops its handler's.
func (w *Writer) Log(rec *meter.Record) {
	if !w.Enabled() {
		return
	}
	t := w.now().Round(0)
	bp := w.pool.Get().(*[]byte)
	b := (*bp)[:0]
	if w.json {
		b = rec.AppendAccessJSON(b, t)
	} else {
		b = rec.AppendAccessText(b, t)
	}
	w.mu.Lock()
	_, _ = w.w.Write(b)
	w.mu.Unlock()
	*bp = b
	w.pool.Put(bp)
}
