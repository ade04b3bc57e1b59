//go:build linux

package spool

import (
	"syscall"
	"testing"
)

// failAppends makes the spool's writes fail: it replaces the active
// segment's mapping with a read-only mapping of the same file, so a copy
// into it faults (turned into an error) and writes nothing, and puts the
// writable mapping back when the test ends.
func failAppends(t testing.TB, s *Spool) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	orig := s.m
	ro, err := syscall.Mmap(int(s.f.Fd()), 0, len(orig), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	s.m = ro
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.m) > 0 && &s.m[0] == &ro[0] {
			s.m = orig
			syscall.Munmap(ro)
		} else {
			syscall.Munmap(orig) // the spool unmapped ro when it sealed the segment
		}
	})
}
