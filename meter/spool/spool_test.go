package spool

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/proctest"
	"sluice/meter"
	"sluice/meter/internal/groupcommit"
	"sluice/meter/metertest"
)

// record returns a realistic record with id "r<i>" (470 bytes framed).
func record(i int) *meter.Record {
	return metertest.Record(fmt.Sprintf("r%07d", i))
}

// written creates a spool with records 0..n-1, runs then on it (when not
// nil), closes it, and returns its directory.
func written(t *testing.T, n int, then func(*Spool)) string {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, Options{Sync: meter.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 0, n)
	if then != nil {
		then(s)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func openT(t *testing.T, dir string, opt Options) *Spool {
	t.Helper()
	s, err := Open(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func appendN(t *testing.T, s *Spool, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := s.Append(record(i)); err != nil {
			t.Fatalf("Append(%d): %v", i, err)
		}
	}
}

// ids decodes a batch and returns its record ids.
func ids(t *testing.T, b Batch) []string {
	t.Helper()
	out := make([]string, 0, b.Len())
	for _, p := range b.Records {
		r, err := meter.Decode(p)
		if err != nil {
			t.Fatalf("decoding %q: %v", p, err)
		}
		out = append(out, r.ID)
	}
	return out
}

// drain reads and acknowledges every record in batches of size.
func drain(t *testing.T, s *Spool, size int) []string {
	t.Helper()
	var out []string
	for {
		b, err := s.Next(size)
		if err != nil {
			t.Fatal(err)
		}
		if b.Len() == 0 {
			return out
		}
		out = append(out, ids(t, b)...)
		if err := s.Ack(b); err != nil {
			t.Fatal(err)
		}
	}
}

func idRange(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, record(i).ID)
	}
	return out
}

func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRoundTripAcrossRotation(t *testing.T) {
	tests := []struct {
		name  string
		opt   Options
		n     int
		batch int
	}{
		{name: "sync none, small segments", opt: Options{Sync: meter.SyncNone, SegmentBytes: 4 << 10}, n: 500, batch: 37},
		{name: "sync interval", opt: Options{Sync: meter.SyncInterval, SyncInterval: time.Millisecond, SegmentBytes: 4 << 10}, n: 500, batch: 100},
		{name: "sync always", opt: Options{Sync: meter.SyncAlways, SegmentBytes: 4 << 10}, n: 150, batch: 7},
		{name: "one batch for everything", opt: Options{Sync: meter.SyncNone, SegmentBytes: 4 << 10}, n: 300, batch: 1000},
		{name: "default options", opt: Options{}, n: 200, batch: 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openT(t, dir, tt.opt)
			appendN(t, s, 0, tt.n)
			if tt.opt.SegmentBytes != 0 && len(segmentFiles(t, dir)) < 3 {
				t.Fatalf("%d segment files, want rotation to have made several", len(segmentFiles(t, dir)))
			}
			if st := s.Stats(); st.Appended != uint64(tt.n) || st.Pending != int64(tt.n) {
				t.Fatalf("stats after append: %+v", st)
			}

			// Without an Ack, Next returns the same records again.
			b1, err := s.Next(tt.batch)
			if err != nil {
				t.Fatal(err)
			}
			b2, err := s.Next(tt.batch)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids(t, b1), ids(t, b2)) || b1.Len() != min(tt.batch, tt.n) {
				t.Fatalf("two Next without Ack: %d and %d records, want the same %d", b1.Len(), b2.Len(), min(tt.batch, tt.n))
			}

			got := drain(t, s, tt.batch)
			if want := idRange(0, tt.n); !slices.Equal(got, want) {
				t.Fatalf("read %d records, want %d in order (first got %v)", len(got), len(want), got[:min(3, len(got))])
			}
			st := s.Stats()
			if st.Pending != 0 || st.Acked != uint64(tt.n) || st.Segments != 1 {
				t.Errorf("stats after draining: %+v, want 0 pending, %d acked, 1 segment", st, tt.n)
			}
			if files := segmentFiles(t, dir); len(files) != 1 {
				t.Errorf("segment files after draining: %v, want only the active one", files)
			}

			// Appending after a full drain continues the stream.
			appendN(t, s, tt.n, tt.n+5)
			if got := drain(t, s, tt.batch); !slices.Equal(got, idRange(tt.n, tt.n+5)) {
				t.Errorf("after drain, read %v", got)
			}
		})
	}
}

// TestConcurrentAppenders: records appended from many goroutines at once are
// all there exactly once, each goroutine's in its own order, while a shipper
// reads and acknowledges concurrently.
func TestConcurrentAppenders(t *testing.T) {
	const writers, each = 8, 400
	s := openT(t, t.TempDir(), Options{Sync: meter.SyncInterval, SyncInterval: 2 * time.Millisecond, SegmentBytes: 8 << 10})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := s.Append(record(w*each + i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	var got []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(got) < writers*each {
			b, err := s.Next(64)
			if err != nil {
				t.Error(err)
				return
			}
			got = append(got, ids(t, b)...)
			if err := s.Ack(b); err != nil {
				t.Error(err)
				return
			}
			_ = s.Stats()
		}
	}()
	wg.Wait()
	<-done
	seen := map[string]int{}
	last := make([]string, writers)
	for _, id := range got {
		seen[id]++
		var n int
		fmt.Sscanf(id, "r%d", &n)
		w := n / each
		if id <= last[w] {
			t.Fatalf("writer %d: %s after %s", w, id, last[w])
		}
		last[w] = id
	}
	if len(seen) != writers*each || len(got) != writers*each {
		t.Fatalf("read %d records, %d distinct; want %d", len(got), len(seen), writers*each)
	}
	if st := s.Stats(); st.Pending != 0 || st.Acked != writers*each {
		t.Errorf("stats: %+v", st)
	}
}

// TestTornTailRepaired: what a crash can leave at the end of a segment is cut
// at Open, counted and logged; every whole record before it is kept, and
// appending continues after it.
func TestTornTailRepaired(t *testing.T) {
	frame := int64(frameHeaderSize + len(record(0).AppendBinary(nil)))
	tests := []struct {
		name     string
		damage   func(t *testing.T, path string, size int64)
		keep     int   // records kept of 10
		cutBytes int64 // bytes cut
	}{
		{
			name:   "partial payload",
			damage: func(t *testing.T, path string, size int64) { truncate(t, path, size-10) },
			keep:   9, cutBytes: frame - 10,
		},
		{
			name:   "partial frame header",
			damage: func(t *testing.T, path string, size int64) { appendBytes(t, path, []byte{0x40, 0x01, 0x02}) },
			keep:   10, cutBytes: 3,
		},
		{
			name:   "bad CRC in the last frame",
			damage: func(t *testing.T, path string, size int64) { flipByte(t, path, size-5) },
			keep:   9, cutBytes: frame,
		},
		{
			name: "length out of range",
			damage: func(t *testing.T, path string, size int64) {
				appendBytes(t, path, []byte{0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4, 5, 6})
			},
			keep: 10, cutBytes: 10,
		},
		{
			name: "a zero length, then bytes (a copy cut before its first bytes)",
			damage: func(t *testing.T, path string, size int64) {
				appendBytes(t, path, append(make([]byte, 4096), 1, 2, 3))
			},
			keep: 10, cutBytes: 4099,
		},
		{
			name:   "bad CRC in a middle frame: the rest of the segment goes",
			damage: func(t *testing.T, path string, size int64) { flipByte(t, path, segmentHeaderSize+3*frame+20) },
			keep:   3, cutBytes: 7 * frame,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := written(t, 10, nil)
			files := segmentFiles(t, dir)
			if len(files) != 1 {
				t.Fatalf("segment files %v", files)
			}
			st, _ := os.Stat(files[0])
			tt.damage(t, files[0], st.Size())

			var logs proctest.Buffer
			s := openT(t, dir, Options{Sync: meter.SyncNone, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			stats := s.Stats()
			if stats.Repairs != 1 || stats.RepairedBytes != uint64(tt.cutBytes) || stats.Pending != int64(tt.keep) {
				t.Errorf("stats after repair: %+v, want 1 repair of %d bytes, %d pending", stats, tt.cutBytes, tt.keep)
			}
			if !strings.Contains(logs.String(), "torn tail") {
				t.Errorf("no log line for the repair:\n%s", logs.String())
			}
			appendN(t, s, 100, 103)
			want := append(idRange(0, tt.keep), idRange(100, 103)...)
			if got := drain(t, s, 4); !slices.Equal(got, want) {
				t.Errorf("read %v, want %v", got, want)
			}
		})
	}
}

func TestTornSegmentHeader(t *testing.T) {
	dir := written(t, 3, nil)
	// A crash right after creating the next segment, before its header was
	// complete.
	if err := os.WriteFile(filepath.Join(dir, "000000000002.seg"), []byte("SLS"), 0o640); err != nil {
		t.Fatal(err)
	}
	s := openT(t, dir, Options{Sync: meter.SyncNone})
	if st := s.Stats(); st.Repairs != 1 || st.Pending != 3 {
		t.Errorf("stats: %+v", st)
	}
	appendN(t, s, 3, 5)
	if got := drain(t, s, 10); !slices.Equal(got, idRange(0, 5)) {
		t.Errorf("read %v", got)
	}
}

func TestOpenRefusesForeignSegment(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "000000000001.seg"), []byte("not a spool file at all"), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "not a spool segment") {
		t.Fatalf("Open = %v, want a bad header error", err)
	}
	// The lock was released: a later Open is not refused as "in use".
	os.Remove(filepath.Join(dir, "000000000001.seg"))
	openT(t, dir, Options{})
}

// TestAckPersistsAcrossReopen: after a reopen, delivery resumes after the
// last acknowledged batch; a batch read but not acknowledged is delivered
// again (at least once); acknowledged segments are gone from disk.
func TestAckPersistsAcrossReopen(t *testing.T) {
	tests := []struct {
		name string
		sync meter.SyncMode
	}{
		{"sync none", meter.SyncNone},
		{"sync interval", meter.SyncInterval},
		{"sync always", meter.SyncAlways},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			opt := Options{Sync: tt.sync, SegmentBytes: 4 << 10}
			s, err := Open(dir, opt)
			if err != nil {
				t.Fatal(err)
			}
			appendN(t, s, 0, 100)
			filesBefore := len(segmentFiles(t, dir))
			b, _ := s.Next(45)
			if err := s.Ack(b); err != nil {
				t.Fatal(err)
			}
			if got := len(segmentFiles(t, dir)); got >= filesBefore {
				t.Errorf("segment files %d after acknowledging 45 records, had %d: want the acknowledged ones deleted", got, filesBefore)
			}
			if b, _ := s.Next(30); b.Len() != 30 { // read, never acknowledged
				t.Fatalf("Next(30) = %d records", b.Len())
			}
			// A stale batch acknowledged late changes nothing.
			if err := s.Ack(b); err != nil {
				t.Fatal(err)
			}
			s.Close()

			s = openT(t, dir, opt)
			if st := s.Stats(); st.Pending != 55 {
				t.Errorf("pending after reopen = %d, want 55", st.Pending)
			}
			if got := drain(t, s, 10); !slices.Equal(got, idRange(45, 100)) {
				t.Errorf("after reopen read %d records starting %v, want r45..r99", len(got), got[:min(1, len(got))])
			}
		})
	}
}

func TestAckFileUnreadable(t *testing.T) {
	tests := []struct{ name, content string }{
		{"garbage", "hello"},
		{"no newline", "1 8"},
		{"offset inside the header", "1 3\n"},
		{"empty (renamed before its data reached the disk)", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := written(t, 10, func(s *Spool) {
				b, _ := s.Next(5)
				s.Ack(b)
			})
			if err := os.WriteFile(filepath.Join(dir, ackFileName), []byte(tt.content), 0o640); err != nil {
				t.Fatal(err)
			}
			var logs proctest.Buffer
			s := openT(t, dir, Options{Sync: meter.SyncNone, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if got := drain(t, s, 100); !slices.Equal(got, idRange(0, 10)) {
				t.Errorf("read %v, want everything again", got)
			}
			if !strings.Contains(logs.String(), "ignoring the ack file") {
				t.Errorf("no warning:\n%s", logs.String())
			}
		})
	}
}

// TestAckFileOfEarlierVersion: an ack file an earlier version wrote (by
// write-rename, numbers unpadded, with a leftover temporary file) is read,
// and the next Ack's fixed-width line, written in place, replaces it whole.
func TestAckFileOfEarlierVersion(t *testing.T) {
	dir := written(t, 10, nil)
	frame := int64(frameHeaderSize + len(record(0).AppendBinary(nil)))
	for name, content := range map[string]string{
		ackFileName:          fmt.Sprintf("1 %d\n", segmentHeaderSize+3*frame),
		ackFileName + ".tmp": "1 8\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	s := openT(t, dir, Options{Sync: meter.SyncNone})
	if _, err := os.Stat(filepath.Join(dir, ackFileName+".tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temporary ack file is still there: %v", err)
	}
	b, err := s.Next(2)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(t, b); !slices.Equal(got, idRange(3, 5)) {
		t.Fatalf("first batch %v, want r3, r4", got)
	}
	if err := s.Ack(b); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, ackFileName))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%020d %020d\n", 1, segmentHeaderSize+5*frame)
	if string(raw) != want {
		t.Errorf("ack file %q, want %q", raw, want)
	}
	s.Close()
	s = openT(t, dir, Options{Sync: meter.SyncNone})
	if got := drain(t, s, 100); !slices.Equal(got, idRange(5, 10)) {
		t.Errorf("after reopen read %v, want r5..r9", got)
	}
}

func TestAckNotOnBoundary(t *testing.T) {
	dir := written(t, 10, nil)
	frame := int64(frameHeaderSize + len(record(0).AppendBinary(nil)))
	ack := fmt.Sprintf("1 %d\n", segmentHeaderSize+4*frame+7)
	if err := os.WriteFile(filepath.Join(dir, ackFileName), []byte(ack), 0o640); err != nil {
		t.Fatal(err)
	}
	s := openT(t, dir, Options{Sync: meter.SyncNone})
	if got := drain(t, s, 100); !slices.Equal(got, idRange(4, 10)) {
		t.Errorf("read %v, want from the boundary before the acknowledged offset", got)
	}
}

// TestBoundDropsOldest: past MaxBytes the oldest segments go, unacknowledged
// or not; the loss is counted and logged once per dropped segment; the spool
// never exceeds its bound; the newest records are kept.
func TestBoundDropsOldest(t *testing.T) {
	tests := []struct {
		name    string
		ackedAt int // records acknowledged before the flood (they are not losses)
	}{
		{"nothing acknowledged", 0},
		{"part of the oldest segment acknowledged", 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs proctest.Buffer
			opt := Options{Sync: meter.SyncNone, MaxBytes: 160 << 10, SegmentBytes: 16 << 10, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
			s := openT(t, t.TempDir(), opt)
			appendN(t, s, 0, 10)
			if tt.ackedAt > 0 {
				b, _ := s.Next(tt.ackedAt)
				s.Ack(b)
			}
			const n = 2000 // about 660 KB of records
			for i := 10; i < n; i++ {
				if err := s.Append(record(i)); err != nil {
					t.Fatal(err)
				}
				if st := s.Stats(); st.Bytes > opt.MaxBytes {
					t.Fatalf("after record %d: %d bytes on disk, bound %d", i, st.Bytes, opt.MaxBytes)
				}
			}
			st := s.Stats()
			if st.Drops == 0 {
				t.Fatal("no drop counted")
			}
			if st.DroppedRecords+uint64(st.Pending) != n-uint64(tt.ackedAt) {
				t.Errorf("dropped %d + pending %d != appended %d - acked %d", st.DroppedRecords, st.Pending, n, tt.ackedAt)
			}
			frame := uint64(frameHeaderSize + len(record(0).AppendBinary(nil)))
			if st.DroppedBytes != st.DroppedRecords*frame {
				t.Errorf("dropped bytes %d, want %d records x %d", st.DroppedBytes, st.DroppedRecords, frame)
			}
			if got := strings.Count(logs.String(), "dropped the oldest segment"); got != int(st.Drops) {
				t.Errorf("%d drop log lines, %d drops counted", got, st.Drops)
			}
			got := drain(t, s, 500)
			if want := idRange(n-len(got), n); !slices.Equal(got, want) {
				t.Errorf("kept records are not the newest contiguous run: first %s last %s", got[0], got[len(got)-1])
			}
			if int64(len(got)) != st.Pending {
				t.Errorf("read %d, pending was %d", len(got), st.Pending)
			}
		})
	}
}

// gatherWrites makes s gather concurrent Appends into one write
// (groupcommit), as it does where a write is a system call or an fsync
// follows it, whatever the platform and the sync mode of the test.
func gatherWrites(s *Spool) {
	if s.gc == nil {
		s.gc = groupcommit.New(s.flush)
	}
}

// TestGatheringByMode: frames are gathered where that saves system calls
// (outside Linux; SyncAlways), and copied one by one into the mapping
// otherwise.
func TestGatheringByMode(t *testing.T) {
	for _, mode := range benchModes {
		s := openT(t, t.TempDir(), Options{Sync: mode})
		if want := !mappedSegments || mode == meter.SyncAlways; (s.gc != nil) != want {
			t.Errorf("sync %s: gathering %v, want %v", mode, s.gc != nil, want)
		}
	}
}

// TestConcurrentAppends: Appends from many goroutines at once, on each
// mode's own path, all land whole, each in its own write where frames are
// not gathered; with writes failing, each returns the error and none lands.
func TestConcurrentAppends(t *testing.T) {
	const goroutines, each = 8, 50
	for _, mode := range benchModes {
		for _, fail := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fail=%v", mode, fail), func(t *testing.T) {
				s := openT(t, t.TempDir(), Options{Sync: mode, MaxBytes: 1 << 20, SegmentBytes: 64 << 10})
				if err := s.Append(record(-1)); err != nil { // creates the active segment
					t.Fatal(err)
				}
				if fail {
					failAppends(t, s)
				}
				var wg sync.WaitGroup
				var failed atomic.Int64
				for g := range goroutines {
					wg.Go(func() {
						for i := range each {
							if err := s.Append(record(g*each + i)); err != nil {
								failed.Add(1)
							}
						}
					})
				}
				wg.Wait()
				want := []string{record(-1).ID}
				if fail {
					if n := failed.Load(); n != goroutines*each {
						t.Fatalf("%d Appends failed, want all %d", n, goroutines*each)
					}
				} else {
					if n := failed.Load(); n != 0 {
						t.Fatalf("%d Appends failed", n)
					}
					want = append(want, idRange(0, goroutines*each)...)
				}
				st := s.Stats()
				if s.gc == nil && !fail && st.Writes != uint64(len(want)) {
					t.Errorf("%d writes for %d records copied one by one", st.Writes, len(want))
				}
				got := drain(t, s, 1000)
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("spool holds %d records, want %d", len(got), len(want))
				}
			})
		}
	}
}

// TestAppendsShareAWrite: the Appends queued behind a write under way are
// written by one write; each returns after it, with its error when it
// failed, and every Append that returned nil is in the spool (the gathered
// path: gatherWrites).
func TestAppendsShareAWrite(t *testing.T) {
	const queued = 16
	for _, mode := range benchModes {
		for _, fail := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fail=%v", mode, fail), func(t *testing.T) {
				dir := t.TempDir()
				s := openT(t, dir, Options{Sync: mode})
				gatherWrites(s)
				if err := s.Append(record(-1)); err != nil { // creates the active segment
					t.Fatal(err)
				}
				if fail {
					failAppends(t, s)
				}
				errs := metertest.AppendQueued(&s.mu, s.gc.Queued, queued, func(i int) error {
					return s.Append(record(i))
				})
				ok := []string{record(-1).ID}
				for i, err := range errs {
					if (err != nil) != fail {
						t.Errorf("Append %d: %v", i, err)
					}
					if err == nil {
						ok = append(ok, record(i).ID)
					}
				}
				st := s.Stats()
				if st.Writes != 3 || st.Appended != uint64(len(ok)) || st.AppendErrors != uint64(queued+2-len(ok)) {
					t.Errorf("stats %+v: want 3 writes, %d appended, %d errors", st, len(ok), queued+2-len(ok))
				}
				got := drain(t, s, 100)
				slices.Sort(got)
				slices.Sort(ok)
				if !slices.Equal(got, ok) {
					t.Errorf("spool holds %q, want %q", got, ok)
				}
			})
		}
	}
}

// TestBatchedAppendsKeepRotationAndBound: batches of appends that cross
// segment ends and the bound leave the same segments, drops and counts as
// the same records appended one at a time.
func TestBatchedAppendsKeepRotationAndBound(t *testing.T) {
	const rounds, queued = 100, 24 // 2,500 records, about 330 KB: many drops
	opt := Options{Sync: meter.SyncNone, MaxBytes: 160 << 10, SegmentBytes: 16 << 10}
	one := openT(t, t.TempDir(), opt)
	batchedDir := t.TempDir()
	batched := openT(t, batchedDir, opt)
	gatherWrites(batched)
	for r := range rounds {
		base := r * (queued + 1)
		appendN(t, one, base, base+queued+1)
		errs := metertest.AppendQueued(&batched.mu, batched.gc.Queued, queued, func(i int) error {
			return batched.Append(record(base + i))
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if st := batched.Stats(); st.Bytes > opt.MaxBytes {
			t.Fatalf("after round %d: %d bytes on disk, bound %d", r, st.Bytes, opt.MaxBytes)
		}
	}
	want, got := one.Stats(), batched.Stats()
	if want.Drops == 0 {
		t.Fatal("no drop: the test does not cross the bound")
	}
	files := segmentFiles(t, batchedDir)
	last, _ := parseSegmentName(filepath.Base(files[len(files)-1]))
	// A batch is split where a frame starts a segment or drops one.
	if got.Writes > 2*rounds+last+got.Drops {
		t.Errorf("%d writes for %d rounds, %d segments and %d drops", got.Writes, rounds, last, got.Drops)
	}
	want.Writes, got.Writes = 0, 0
	if got != want {
		t.Errorf("batched stats %+v\none at a time %+v", got, want)
	}
	sizes := func(s *Spool) []segment { s.mu.Lock(); defer s.mu.Unlock(); return slices.Clone(s.segs) }
	if g, w := sizes(batched), sizes(one); !slices.Equal(g, w) {
		t.Errorf("batched segments %+v\none at a time %+v", g, w)
	}
	kept := drain(t, batched, 500)
	slices.Sort(kept)
	if int64(len(slices.Compact(kept))) != want.Pending {
		t.Errorf("read %d distinct records, %d pending", len(kept), want.Pending)
	}
}

// TestDropUnderReader: a batch read from a segment that is dropped before it
// is acknowledged stays readable, and its late Ack does not move the cursor
// backwards.
func TestDropUnderReader(t *testing.T) {
	opt := Options{Sync: meter.SyncNone, MaxBytes: 160 << 10, SegmentBytes: 16 << 10}
	s := openT(t, t.TempDir(), opt)
	appendN(t, s, 0, 10)
	b, err := s.Next(10)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 10, 2000)
	if s.Stats().Drops == 0 {
		t.Fatal("no drop")
	}
	if got := ids(t, b); !slices.Equal(got, idRange(0, 10)) {
		t.Errorf("batch changed under a drop: %v", got)
	}
	pending := s.Stats().Pending
	if err := s.Ack(b); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Pending != pending || st.Acked != 0 {
		t.Errorf("a stale Ack changed the spool: pending %d -> %d, acked %d", pending, st.Pending, st.Acked)
	}
}

func TestAppendErrors(t *testing.T) {
	s := openT(t, t.TempDir(), Options{Sync: meter.SyncNone})
	big := record(1)
	big.RequestedModel = strings.Repeat("m", MaxRecordBytes)
	if err := s.Append(big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Append(huge) = %v, want ErrTooLarge", err)
	}
	if err := s.Append(record(2)); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.AppendErrors != 1 || st.Appended != 1 {
		t.Errorf("stats: %+v", st)
	}
	if got := drain(t, s, 10); !slices.Equal(got, []string{record(2).ID}) {
		t.Errorf("read %v", got)
	}
	s.Close()
	if err := s.Append(record(3)); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close = %v", err)
	}
	if _, err := s.Next(1); !errors.Is(err, ErrClosed) {
		t.Errorf("Next after Close = %v", err)
	}
	if err := s.Ack(Batch{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Ack after Close = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestOpenLocked(t *testing.T) {
	dir := t.TempDir()
	openT(t, dir, Options{})
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Open = %v, want in use", err)
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		name string
		opt  Options
		want string
	}{
		{"segment too small", Options{SegmentBytes: 100}, "below the minimum"},
		{"bound below two segments", Options{MaxBytes: 1 << 20, SegmentBytes: 600 << 10}, "two segments"},
		{"bound below two records", Options{MaxBytes: 100 << 10, SegmentBytes: 8 << 10}, "two records"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Open(t.TempDir(), tt.opt); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open = %v, want %q", err, tt.want)
			}
		})
	}
	o := Options{}
	if err := o.defaults(); err != nil || o.MaxBytes != DefaultMaxBytes || o.SegmentBytes != 16<<20 {
		t.Errorf("defaults: %+v, %v", o, err)
	}
}

// TestAppendDoesNotAllocate: in steady state an Append allocates nothing
// (the frame buffer is reused).
func TestAppendDoesNotAllocate(t *testing.T) {
	s := openT(t, t.TempDir(), Options{Sync: meter.SyncNone, MaxBytes: 1 << 30})
	r := record(1)
	s.Append(r)
	if n := testing.AllocsPerRun(200, func() { s.Append(r) }); n != 0 {
		t.Errorf("Append allocates %v times per record", n)
	}
}

func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x20
	if err := os.WriteFile(path, b, 0o640); err != nil {
		t.Fatal(err)
	}
}

// TestBatchLines: a batch's Lines are its records, each followed by a
// newline, across segments; Records stay each record's own bytes.
func TestBatchLines(t *testing.T) {
	s := openT(t, t.TempDir(), Options{Sync: meter.SyncNone, SegmentBytes: 4 << 10})
	appendN(t, s, 0, 30) // several segments
	for _, max := range []int{1, 7, 30, 100} {
		b, err := s.Next(max)
		if err != nil {
			t.Fatal(err)
		}
		var want []byte
		for i := range min(max, 30) {
			want = append(record(i).AppendJSON(want), '\n')
		}
		if got := string(b.Lines()); got != string(want) {
			t.Errorf("Next(%d).Lines() = %q, want %q", max, got, want)
		}
		if got := ids(t, b); !slices.Equal(got, idRange(0, min(max, 30))) {
			t.Errorf("Next(%d) records %v", max, got)
		}
	}
}

// writeSegment writes segment seq with magic and a frame of each payload.
func writeSegment(t *testing.T, dir string, seq uint64, magic [segmentHeaderSize]byte, payloads ...[]byte) {
	t.Helper()
	data := append([]byte(nil), magic[:]...)
	for _, p := range payloads {
		start := len(data)
		data = append(append(data, make([]byte, frameHeaderSize)...), p...)
		putFrameHeader(data[start:])
	}
	if err := os.WriteFile(filepath.Join(dir, segmentName(seq)), data, 0o640); err != nil {
		t.Fatal(err)
	}
}

// jsonSegment writes segment seq of records from..to-1 as an earlier
// version wrote it: the SLSPOOL1 header and frames of their JSON encoding.
func jsonSegment(t *testing.T, dir string, seq uint64, from, to int) {
	t.Helper()
	var payloads [][]byte
	for i := from; i < to; i++ {
		payloads = append(payloads, record(i).AppendJSON(nil))
	}
	writeSegment(t, dir, seq, segmentMagicJSON, payloads...)
}

// A spool an earlier version wrote (JSON frames, SLSPOOL1) is read as it
// was, including a segment it was still appending to; new records go to a
// new segment in the binary encoding, never into an SLSPOOL1 one; Next
// returns every record as JSON, byte for byte what AppendJSON writes, in
// order, across both kinds and a restart.
func TestSegmentsOfEarlierVersion(t *testing.T) {
	dir := t.TempDir()
	jsonSegment(t, dir, 1, 0, 30)
	jsonSegment(t, dir, 2, 30, 45) // the one it was appending to
	s := openT(t, dir, Options{Sync: meter.SyncNone})
	if st := s.Stats(); st.Pending != 45 || st.Repairs != 0 {
		t.Fatalf("stats after Open: %+v", st)
	}
	appendN(t, s, 45, 60)
	files := segmentFiles(t, dir)
	if len(files) != 3 {
		t.Fatalf("segments %q: want the two earlier ones and one new", files)
	}
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want := segmentMagicJSON
		if i == 2 {
			want = segmentMagic
		}
		if !bytes.HasPrefix(b, want[:]) {
			t.Errorf("%s starts %q, want %q", f, b[:segmentHeaderSize], want)
		}
	}
	b, err := s.Next(1000)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for i := range 60 {
		want = append(record(i).AppendJSON(want), '\n')
	}
	if !bytes.Equal(b.Lines(), want) {
		t.Fatalf("Next's lines:\n%s\nwant:\n%s", b.Lines(), want)
	}
	// Acknowledge the first 40 (into the second earlier segment), then
	// reopen: the rest, of both kinds, come back.
	b40, err := s.Next(40)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(b40); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openT(t, dir, Options{Sync: meter.SyncNone})
	appendN(t, s, 60, 65)
	if got, want := drain(t, s, 7), idRange(40, 65); !slices.Equal(got, want) {
		t.Fatalf("after reopening: %q, want %q", got, want)
	}
	if st := s.Stats(); st.Corrupt != 0 || st.Pending != 0 {
		t.Errorf("stats: %+v", st)
	}
}

// A whole frame (its CRC holds) whose payload is not a record is skipped
// alone, counted as corrupt: the records around it are delivered.
func TestUndecodableFrameSkipped(t *testing.T) {
	dir := t.TempDir()
	var payloads [][]byte
	for i := range 5 {
		p := record(i).AppendBinary(nil)
		if i == 2 {
			p = []byte("not a record")
		}
		payloads = append(payloads, p)
	}
	writeSegment(t, dir, 1, segmentMagic, payloads...)
	s := openT(t, dir, Options{Sync: meter.SyncNone})
	if got, want := drain(t, s, 100), []string{record(0).ID, record(1).ID, record(3).ID, record(4).ID}; !slices.Equal(got, want) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
	if st := s.Stats(); st.Corrupt != 1 || st.Pending != 0 {
		t.Errorf("stats: %+v, want 1 corrupt and nothing pending", st)
	}
}
