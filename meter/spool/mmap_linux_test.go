//go:build linux

package spool

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"sluice/meter"
)

// crashCopy copies the spool's segment and ack files, as a kill -9 would
// leave them, to a new directory (the page cache holds what the mapping
// got) and returns it. The spool stays open.
func crashCopy(t *testing.T, s *Spool) string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	dst := t.TempDir()
	for _, pattern := range []string{"*.seg", ackFileName} {
		m, _ := filepath.Glob(filepath.Join(s.dir, pattern))
		for _, path := range m {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dst, filepath.Base(path)), b, 0o640); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dst
}

// activeUsed is the active segment's size through its last frame.
func activeUsed(s *Spool) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.segs[len(s.segs)-1].size
}

// TestPreallocatedSegmentReopened: a segment left preallocated by a crash,
// zeros after its last frame, reopens with every record, no repair, and
// appending continues after the last frame; a torn frame inside the mapping
// (a copy a kill cut short) is cut, counted, and only its bytes.
func TestPreallocatedSegmentReopened(t *testing.T) {
	frame := int64(frameHeaderSize + len(record(0).AppendBinary(nil)))
	tests := []struct {
		name     string
		damage   func(m []byte, used int64) // writes into the mapping after the frames
		keep     int
		cutBytes int64
	}{
		{name: "zeros after the last frame", damage: func([]byte, int64) {}, keep: 10},
		{
			name: "a frame copied without its last bytes",
			damage: func(m []byte, used int64) {
				f := putFrameHeaderCopy(record(50).AppendBinary(make([]byte, frameHeaderSize)))
				copy(m[used:], f[:len(f)-30])
			},
			keep: 10, cutBytes: frame - 30,
		},
		{
			name: "a frame copied without its length (a copy cut out of order)",
			damage: func(m []byte, used int64) {
				f := putFrameHeaderCopy(record(50).AppendBinary(make([]byte, frameHeaderSize)))
				copy(m[used+4:], f[4:])
			},
			keep: 10, cutBytes: frame,
		},
		{
			name: "a frame with a bad CRC",
			damage: func(m []byte, used int64) {
				f := putFrameHeaderCopy(record(50).AppendBinary(make([]byte, frameHeaderSize)))
				f[len(f)-1] ^= 1
				copy(m[used:], f)
			},
			keep: 10, cutBytes: frame,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openT(t, t.TempDir(), Options{Sync: meter.SyncNone, SegmentBytes: 64 << 10})
			appendN(t, s, 0, 10)
			used := activeUsed(s)
			s.mu.Lock()
			tt.damage(s.m, used)
			s.mu.Unlock()
			dir := crashCopy(t, s)
			files := segmentFiles(t, dir)
			if st, err := os.Stat(files[0]); err != nil || st.Size() != s.capacity() {
				t.Fatalf("the active segment is not preallocated: %v, %v", st.Size(), err)
			}

			r := openT(t, dir, Options{Sync: meter.SyncNone, SegmentBytes: 64 << 10})
			st := r.Stats()
			wantRepairs := uint64(0)
			if tt.cutBytes > 0 {
				wantRepairs = 1
			}
			if st.Repairs != wantRepairs || st.RepairedBytes != uint64(tt.cutBytes) || st.Pending != int64(tt.keep) || st.Bytes != used {
				t.Errorf("stats after reopen: %+v, want %d repairs of %d bytes, %d pending, %d bytes", st, wantRepairs, tt.cutBytes, tt.keep, used)
			}
			appendN(t, r, 100, 103)
			want := append(idRange(0, tt.keep), idRange(100, 103)...)
			if got := drain(t, r, 4); !slices.Equal(got, want) {
				t.Errorf("read %v, want %v", got, want)
			}
		})
	}
}

// putFrameHeaderCopy fills the header of b (header, then payload) and
// returns it.
func putFrameHeaderCopy(b []byte) []byte {
	putFrameHeader(b)
	return b
}

// TestPreallocatedFiles: the active segment is preallocated and sparse,
// sealed segments are cut to their frames when the active one fills up, and
// the bound counts the bytes written, not the preallocated ones.
func TestPreallocatedFiles(t *testing.T) {
	tests := []struct {
		name string
		opt  Options
		n    int
	}{
		{name: "rotation", opt: Options{Sync: meter.SyncNone, SegmentBytes: 16 << 10}, n: 600},
		{name: "rotation, sync interval", opt: Options{Sync: meter.SyncInterval, SegmentBytes: 16 << 10}, n: 600},
		{name: "bound reached", opt: Options{Sync: meter.SyncNone, MaxBytes: 160 << 10, SegmentBytes: 16 << 10}, n: 2000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openT(t, dir, tt.opt)
			appendN(t, s, 0, tt.n)
			st := s.Stats()
			files := segmentFiles(t, dir)
			if len(files) < 3 || len(files) != st.Segments {
				t.Fatalf("%d segment files, %d in the stats: want several", len(files), st.Segments)
			}
			if tt.opt.MaxBytes > 0 && (st.Drops == 0 || st.Bytes > tt.opt.MaxBytes) {
				t.Errorf("stats %+v: want drops and at most %d bytes", st, tt.opt.MaxBytes)
			}
			var sealed int64
			for _, path := range files[:len(files)-1] {
				fi, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				if fi.Size() > tt.opt.SegmentBytes || fi.Size() < tt.opt.SegmentBytes-frameHeaderSize-MaxRecordBytes/64 {
					t.Errorf("sealed segment %s: %d bytes, want its frames (up to %d)", filepath.Base(path), fi.Size(), tt.opt.SegmentBytes)
				}
				sealed += fi.Size()
			}
			used := activeUsed(s)
			if sealed+used != st.Bytes {
				t.Errorf("sealed segments %d + active %d bytes, Stats.Bytes %d", sealed, used, st.Bytes)
			}
			var fs syscall.Stat_t
			if err := syscall.Stat(files[len(files)-1], &fs); err != nil {
				t.Fatal(err)
			}
			if fs.Size != s.capacity() || fs.Blocks*512 > used+64<<10 {
				t.Errorf("active segment: %d bytes, %d allocated, %d used; want %d, sparse", fs.Size, fs.Blocks*512, used, s.capacity())
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Stat(files[len(files)-1]); err != nil || fi.Size() != used {
				t.Errorf("after Close the active segment is %d bytes (%v), want its %d used", fi.Size(), err, used)
			}
		})
	}
}

// TestFaultInTheMapping: a copy into the mapping that faults (here the
// file was cut behind the spool's back, as a full disk makes a page fault
// fail) is an Append error, not a crash; what was written before stays, and
// the next Appends go on after it.
func TestFaultInTheMapping(t *testing.T) {
	s := openT(t, t.TempDir(), Options{Sync: meter.SyncNone, SegmentBytes: 64 << 10})
	appendN(t, s, 0, 3)
	s.mu.Lock()
	err := s.f.Truncate(4096) // the mapping's pages past the first fault
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	var ok []string
	failed := 0
	for i := 3; i < 40; i++ {
		if err := s.Append(record(i)); err != nil {
			if !errors.Is(err, errFault) {
				t.Fatalf("Append(%d) = %v, want a fault error", i, err)
			}
			failed++
			continue
		}
		ok = append(ok, record(i).ID)
	}
	if failed != 1 {
		t.Errorf("%d Appends failed, want the one that crossed the cut", failed)
	}
	if st := s.Stats(); st.AppendErrors != 1 {
		t.Errorf("stats %+v: want 1 append error", st)
	}
	want := append(idRange(0, 3), ok...)
	if got := drain(t, s, 100); !slices.Equal(got, want) {
		t.Errorf("read %v, want %v", got, want)
	}
	r := openT(t, crashCopy(t, s), Options{Sync: meter.SyncNone, SegmentBytes: 64 << 10})
	if st := r.Stats(); st.Repairs != 0 || st.Pending != 0 {
		t.Errorf("reopened copy: %+v, want nothing pending, no repair", st)
	}
}
