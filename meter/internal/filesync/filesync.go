// Package filesync fsyncs the files of the meter's sinks in the background
// (meter.SyncInterval), off the request path.
package filesync

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Syncer fsyncs, every interval, the file being written when it has new
// data, the files retired since the last round (then closes them), and the
// directories whose entries changed.
//
// Ownership: a file handed to Wrote stays open until the owner hands it to
// Retire (the syncer closes it after a last fsync) or calls Stop and then
// closes it. So a file the syncer is fsyncing is never closed under it.
// Methods are safe for concurrent use.
type Syncer struct {
	onErr func(error)

	mu      sync.Mutex
	active  *os.File
	dirty   bool
	retired []*os.File
	dirs    []string
	// marked is active while dirty (nil otherwise), for Wrote to read
	// without the lock: a file written by every request is recorded once
	// a round, not once a write.
	marked atomic.Pointer[os.File]

	stop chan struct{}
	done chan struct{}
}

// Start starts a syncer; onErr receives each round's fsync errors.
func Start(interval time.Duration, onErr func(error)) *Syncer {
	s := &Syncer{onErr: onErr, stop: make(chan struct{}), done: make(chan struct{})}
	go s.loop(interval)
	return s
}

// Wrote records that f, the file being written, has unsynced data.
//
// When f is recorded already it only reads an atomic. A write whose Wrote
// returns so while a round is taking f may miss that round's fsync (the
// round may not see it yet); it is fsynced by the round after the next
// Wrote, or when the file is retired or closed.
func (s *Syncer) Wrote(f *os.File) {
	if s.marked.Load() == f {
		return
	}
	s.mu.Lock()
	s.active, s.dirty = f, true
	s.marked.Store(f)
	s.mu.Unlock()
}

// Retire hands f, which will not be written again, to the syncer, which
// fsyncs and closes it in its next round; the owner must not use f
// afterwards. On a nil Syncer (the modes without a background fsync: none
// never fsyncs, always has fsynced every write) it closes f at once and
// returns Close's error.
func (s *Syncer) Retire(f *os.File) error {
	if s == nil {
		return f.Close()
	}
	s.mu.Lock()
	if s.active == f {
		s.active, s.dirty = nil, false
		s.marked.Store(nil)
	}
	s.retired = append(s.retired, f)
	s.mu.Unlock()
	return nil
}

// DirChanged records that an entry of dir was created or renamed.
func (s *Syncer) DirChanged(dir string) {
	s.mu.Lock()
	s.dirs = append(s.dirs, dir)
	s.mu.Unlock()
}

// Stop runs a last round and stops the syncer. The owner may then close the
// file it was writing. Stop on a nil Syncer does nothing.
func (s *Syncer) Stop() {
	if s == nil {
		return
	}
	close(s.stop)
	<-s.done
}

func (s *Syncer) loop(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			s.round()
			return
		case <-t.C:
			s.round()
		}
	}
}

func (s *Syncer) round() {
	s.mu.Lock()
	var active *os.File
	if s.dirty {
		active, s.dirty = s.active, false
		s.marked.Store(nil)
	}
	retired, dirs := s.retired, s.dirs
	s.retired, s.dirs = nil, nil
	s.mu.Unlock()

	var errs []error
	for _, f := range retired {
		errs = append(errs, f.Sync(), f.Close())
	}
	if active != nil {
		errs = append(errs, active.Sync())
	}
	for i, d := range dirs {
		if i == 0 || d != dirs[i-1] {
			errs = append(errs, SyncDir(d))
		}
	}
	if err := errors.Join(errs...); err != nil {
		s.onErr(err)
	}
}

// Close fsyncs f when fsync is true, then closes it, and returns the first
// error.
func Close(f *os.File, fsync bool) error {
	var err error
	if fsync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// SyncDir fsyncs a directory, making the entries created or renamed in it
// durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
