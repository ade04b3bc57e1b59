package filesync

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

func TestSyncer(t *testing.T) {
	dir := t.TempDir()
	open := func(name string) *os.File {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	var errCount atomic.Int32
	s := Start(time.Millisecond, func(error) { errCount.Add(1) })

	active, retired := open("active"), open("retired")
	s.Wrote(retired)
	s.Retire(retired)
	s.Wrote(active)
	s.DirChanged(dir)
	s.DirChanged(dir)
	// A round runs every millisecond; a loaded machine may delay it, so
	// wait for it (up to a bound far above any scheduling delay).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		_, err := retired.Write([]byte("x"))
		if errors.Is(err, os.ErrClosed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a retired file is still open after 10 s of rounds: %v", err)
		}
	}
	if _, err := active.Write([]byte("x")); err != nil {
		t.Errorf("the active file was closed: %v", err)
	}

	// A file that fails to sync is reported.
	broken := open("broken")
	broken.Close()
	s.Wrote(broken)
	s.Stop()
	if errCount.Load() != 1 {
		t.Errorf("%d errors reported, want 1 (the closed file)", errCount.Load())
	}
	active.Close()
}

// After a round has taken the file, the next Wrote records it again: each
// round that follows a Wrote fsyncs it once, however many Wrote calls came
// between (the file here fails its fsync, so each fsync is counted).
func TestWroteAfterRound(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	var fsyncs atomic.Int32
	s := Start(time.Millisecond, func(error) { fsyncs.Add(1) })
	defer s.Stop()
	wait := func(n int32) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); fsyncs.Load() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d fsyncs after 10 s, want %d", fsyncs.Load(), n)
			}
		}
	}
	for i := range int32(3) {
		for range 100 {
			s.Wrote(f)
		}
		wait(i + 1)
	}
	time.Sleep(20 * time.Millisecond) // rounds with nothing written fsync nothing
	if n := fsyncs.Load(); n != 3 {
		t.Errorf("%d fsyncs, want 3", n)
	}
}
