// Package jsonl is a usage record sink that writes one JSON line per record
// to a file: the meter of a gateway run from a file with no platform.
//
// Guarantees: a line for which Append returned nil survives kill -9 of the
// process (it was handed to the kernel by a write(2) before Append returned;
// the lines of concurrent Appends share one write, see groupcommit); Options.Sync
// decides what survives a power loss. Opening a file whose last line is torn
// (no final newline: a crash during a write) cuts that partial line, counts
// and logs it. Reopen closes and reopens the path, for log rotation (rename
// the file, then signal the gateway).
package jsonl

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"sluice/meter"
	"sluice/meter/internal/filesync"
	"sluice/meter/internal/groupcommit"
)

// maxTornLine bounds the partial last line Open cuts: a file whose last
// megabyte has no newline is not a JSONL file this sink wrote, and Open
// refuses it instead of truncating it.
const maxTornLine = 1 << 20

// ErrClosed is returned by the methods of a closed sink.
var ErrClosed = errors.New("jsonl: closed")

// Options configure a sink. The zero value is valid: SyncInterval every
// second, no logging, mode 0640.
type Options struct {
	// Sync is when the file is fsynced (see meter.SyncMode).
	Sync meter.SyncMode
	// SyncInterval is SyncInterval's period (default meter.DefaultSyncInterval).
	SyncInterval time.Duration
	// Perm is the mode of a file the sink creates (default 0640).
	Perm os.FileMode
	// Logger receives repairs, reopens and I/O errors (nil: discarded).
	Logger *slog.Logger
}

// Stats are the sink's counters since Open.
type Stats struct {
	Appended     uint64
	AppendErrors uint64
	// Writes counts the write(2) calls that appended lines: concurrent
	// Appends share one.
	Writes uint64
	// Repairs counts the torn last lines cut when the file was opened (at
	// Open or Reopen); RepairedBytes their bytes.
	Repairs       uint64
	RepairedBytes uint64
	Reopens       uint64
	SyncErrors    uint64
}

// Sink appends records to a JSON lines file.
//
// Concurrency: every method is safe for concurrent use. The lines of the
// Appends that arrive while a write is under way are written together by the
// next write(2), whole lines in the order they were encoded, so lines never
// interleave.
type Sink struct {
	path string
	opt  Options
	log  *slog.Logger
	gc   *groupcommit.Group

	// mu guards the file and the state below; a batch is written under it.
	mu     sync.Mutex
	f      *os.File
	closed bool
	stats  Stats

	syncer *filesync.Syncer // SyncInterval only
}

// Open opens path for appending, creating it, and cuts a torn last line.
func Open(path string, opt Options) (*Sink, error) {
	if opt.SyncInterval <= 0 {
		opt.SyncInterval = meter.DefaultSyncInterval
	}
	if opt.Perm == 0 {
		opt.Perm = 0o640
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Sink{path: path, opt: opt, log: opt.Logger}
	s.gc = groupcommit.New(s.flush)
	f, err := s.openFile()
	if err != nil {
		return nil, err
	}
	s.f = f
	if opt.Sync == meter.SyncInterval {
		s.syncer = filesync.Start(opt.SyncInterval, func(err error) {
			s.mu.Lock()
			s.stats.SyncErrors++
			s.mu.Unlock()
			s.log.Error("jsonl: fsync", "path", s.path, "err", err)
		})
	}
	return s, nil
}

// openFile opens the path for appending and cuts a torn last line. The
// caller holds mu or owns s alone.
func (s *Sink) openFile() (*os.File, error) {
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE|os.O_APPEND, s.opt.Perm)
	if err != nil {
		return nil, fmt.Errorf("jsonl: %w", err)
	}
	if err := s.repair(f); err != nil {
		f.Close()
		return nil, err
	}
	if s.opt.Sync == meter.SyncAlways {
		// The file may be new: make its directory entry durable too.
		if err := filesync.SyncDir(filepath.Dir(s.path)); err != nil {
			f.Close()
			return nil, fmt.Errorf("jsonl: %w", err)
		}
	}
	return f, nil
}

// repair truncates f after its last newline.
func (s *Sink) repair(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("jsonl: %w", err)
	}
	size := st.Size()
	if size == 0 {
		return nil
	}
	tail := make([]byte, min(size, maxTornLine+1))
	if _, err := f.ReadAt(tail, size-int64(len(tail))); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("jsonl: reading %s: %w", s.path, err)
	}
	i := bytes.LastIndexByte(tail, '\n')
	if i == len(tail)-1 {
		return nil
	}
	if i < 0 && size > maxTornLine {
		return fmt.Errorf("jsonl: %s: no newline in its last %d bytes: not a JSON lines file", s.path, maxTornLine)
	}
	keep := size - int64(len(tail)) + int64(i+1)
	if err := f.Truncate(keep); err != nil {
		return fmt.Errorf("jsonl: cutting the torn last line of %s: %w", s.path, err)
	}
	s.stats.Repairs++
	s.stats.RepairedBytes += uint64(size - keep)
	s.log.Warn("jsonl: cut a torn last line", "path", s.path, "offset", keep, "bytes", size-keep)
	return nil
}

// Append writes r as one line. It returns once the line is handed to the
// kernel (and fsynced, with SyncAlways); an error means the line is not in
// the file.
func (s *Sink) Append(r *meter.Record) error {
	return s.gc.Append(func(dst []byte) ([]byte, error) {
		return append(r.AppendJSON(dst), '\n'), nil
	})
}

// flush writes a batch of lines (groupcommit.Flush): all or none.
func (s *Sink) flush(buf []byte, ends []int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	if err := s.writeLocked(buf); err != nil {
		s.stats.AppendErrors += uint64(len(ends))
		return 0, err
	}
	s.stats.Appended += uint64(len(ends))
	return len(ends), nil
}

func (s *Sink) writeLocked(buf []byte) error {
	s.stats.Writes++
	n, err := s.f.Write(buf)
	if err != nil {
		if n > 0 {
			// Cut the partial line so the next one starts on its own line;
			// if that fails too, the next Open cuts it.
			if serr := s.cutPartialLocked(n); serr != nil {
				s.log.Error("jsonl: cutting a partial write", "path", s.path, "err", serr)
			}
		}
		return fmt.Errorf("jsonl: writing %s: %w", s.path, err)
	}
	switch s.opt.Sync {
	case meter.SyncAlways:
		if err := s.f.Sync(); err != nil {
			s.stats.SyncErrors++
			return fmt.Errorf("jsonl: fsync of %s: %w", s.path, err)
		}
	case meter.SyncInterval:
		s.syncer.Wrote(s.f)
	}
	return nil
}

// cutPartialLocked removes the n bytes a failed write left at the end.
func (s *Sink) cutPartialLocked(n int) error {
	st, err := s.f.Stat()
	if err != nil {
		return err
	}
	return s.f.Truncate(st.Size() - int64(n))
}

// Reopen closes the file and opens the path again: after a log rotation
// renamed the file, records go to a new file at the path. On error the sink
// keeps writing to the file it had.
func (s *Sink) Reopen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	f, err := s.openFile()
	if err != nil {
		s.log.Error("jsonl: reopen failed, writing on to the old file", "path", s.path, "err", err)
		return err
	}
	old := s.f
	s.f = f
	s.stats.Reopens++
	if err := s.syncer.Retire(old); err != nil {
		return fmt.Errorf("jsonl: closing the previous file: %w", err)
	}
	return nil
}

// Stats returns the counters.
func (s *Sink) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Close fsyncs (unless SyncNone) and closes the file.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.syncer.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	return filesync.Close(s.f, s.opt.Sync != meter.SyncNone)
}
