package jsonl

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/internal/proctest"
	"sluice/meter"
	"sluice/meter/internal/killtest"
	"sluice/meter/metertest"
)

var record = metertest.Record

func openT(t *testing.T, path string, opt Options) *Sink {
	t.Helper()
	s, err := Open(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// readIDs reads a JSONL file; every line must decode as a record.
func readIDs(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ids []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		r, err := meter.Decode(sc.Bytes())
		if err != nil {
			t.Fatalf("%s line %d: %v", path, len(ids)+1, err)
		}
		ids = append(ids, r.ID)
	}
	return ids
}

func TestAppendConcurrent(t *testing.T) {
	for _, mode := range []meter.SyncMode{meter.SyncNone, meter.SyncInterval, meter.SyncAlways} {
		t.Run(mode.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "usage.jsonl")
			s := openT(t, path, Options{Sync: mode, SyncInterval: time.Millisecond})
			const writers, each = 4, 50
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					for i := range each {
						if err := s.Append(record(fmt.Sprintf("w%d-%d", w, i))); err != nil {
							t.Error(err)
						}
					}
				})
			}
			wg.Wait()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			ids := readIDs(t, path)
			slices.Sort(ids)
			if len(slices.Compact(ids)) != writers*each {
				t.Errorf("%d distinct lines, want %d", len(ids), writers*each)
			}
			if st := s.Stats(); st.Appended != writers*each || st.AppendErrors != 0 {
				t.Errorf("stats %+v", st)
			}
			if err := s.Append(record("late")); err != ErrClosed {
				t.Errorf("Append after Close = %v", err)
			}
		})
	}
}

// TestAppendsShareAWrite: the Appends queued behind a write under way are
// written by one write(2); each returns after it, with its error when it
// failed, and every Append that returned nil is in the file.
func TestAppendsShareAWrite(t *testing.T) {
	const queued = 16
	for _, mode := range []meter.SyncMode{meter.SyncNone, meter.SyncInterval, meter.SyncAlways} {
		for _, fail := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fail=%v", mode, fail), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "usage.jsonl")
				s := openT(t, path, Options{Sync: mode})
				if fail {
					metertest.FailWrites(t, &s.mu, &s.f)
				}
				errs := metertest.AppendQueued(&s.mu, s.gc.Queued, queued, func(i int) error {
					return s.Append(record(fmt.Sprintf("q%d", i)))
				})
				var ok []string
				for i, err := range errs {
					if (err != nil) != fail {
						t.Errorf("Append %d: %v", i, err)
					}
					if err == nil {
						ok = append(ok, fmt.Sprintf("q%d", i))
					}
				}
				st := s.Stats()
				want := Stats{Appended: uint64(len(ok)), AppendErrors: uint64(queued + 1 - len(ok)), Writes: 2}
				if st != want {
					t.Errorf("stats %+v, want %+v", st, want)
				}
				ids := readIDs(t, path)
				slices.Sort(ids)
				slices.Sort(ok)
				if !slices.Equal(ids, ok) {
					t.Errorf("file holds %q, want %q", ids, ok)
				}
			})
		}
	}
}

func TestTornLastLine(t *testing.T) {
	whole := string(record("a").AppendJSON(nil)) + "\n" + string(record("b").AppendJSON(nil)) + "\n"
	tests := []struct {
		name    string
		content string
		repairs uint64
		cut     int
		want    []string
	}{
		{name: "empty file", content: "", want: []string{"c"}},
		{name: "whole lines", content: whole, want: []string{"a", "b", "c"}},
		{name: "partial last line", content: whole + `{"v":1,"id":"tor`, repairs: 1, cut: 16, want: []string{"a", "b", "c"}},
		{name: "only a partial line", content: `{"v":1,"id":"tor`, repairs: 1, cut: 16, want: []string{"c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "usage.jsonl")
			if err := os.WriteFile(path, []byte(tt.content), 0o640); err != nil {
				t.Fatal(err)
			}
			var logs proctest.Buffer
			s := openT(t, path, Options{Sync: meter.SyncNone, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if st := s.Stats(); st.Repairs != tt.repairs || st.RepairedBytes != uint64(tt.cut) {
				t.Errorf("stats %+v, want %d repairs of %d bytes", st, tt.repairs, tt.cut)
			}
			if tt.repairs > 0 && !strings.Contains(logs.String(), "torn last line") {
				t.Errorf("repair not logged: %s", logs.String())
			}
			if err := s.Append(record("c")); err != nil {
				t.Fatal(err)
			}
			if got := readIDs(t, path); !slices.Equal(got, tt.want) {
				t.Errorf("lines %v, want %v", got, tt.want)
			}
		})
	}
}

// TestOpenRefusesNonJSONL: a file with no newline in its last megabyte is not
// one this sink wrote; Open leaves it alone.
func TestOpenRefusesNonJSONL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "blob")
	blob := bytes.Repeat([]byte("x"), maxTornLine+10)
	if err := os.WriteFile(path, blob, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "not a JSON lines file") {
		t.Fatalf("Open = %v", err)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, blob) {
		t.Error("the file was changed")
	}
}

// TestReopen: after the file is renamed (log rotation), Reopen sends the
// next records to a new file at the path; a failed Reopen keeps the old one.
func TestReopen(t *testing.T) {
	for _, mode := range []meter.SyncMode{meter.SyncNone, meter.SyncInterval, meter.SyncAlways} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "usage.jsonl")
			s := openT(t, path, Options{Sync: mode, SyncInterval: time.Millisecond})
			for _, id := range []string{"a", "b"} {
				s.Append(record(id))
			}
			if err := os.Rename(path, path+".1"); err != nil {
				t.Fatal(err)
			}
			s.Append(record("c")) // still the renamed file
			if err := s.Reopen(); err != nil {
				t.Fatal(err)
			}
			s.Append(record("d"))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if got := readIDs(t, path+".1"); !slices.Equal(got, []string{"a", "b", "c"}) {
				t.Errorf("rotated file: %v", got)
			}
			if got := readIDs(t, path); !slices.Equal(got, []string{"d"}) {
				t.Errorf("new file: %v", got)
			}
			if st := s.Stats(); st.Reopens != 1 || st.Appended != 4 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestReopenFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "usage.jsonl")
	s := openT(t, path, Options{Sync: meter.SyncNone})
	s.Append(record("a"))
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := s.Reopen(); err == nil {
		t.Fatal("Reopen into a missing directory succeeded")
	}
	if err := s.Append(record("b")); err != nil {
		t.Fatalf("Append after a failed Reopen: %v", err)
	}
	s.Close()
	if got := readIDs(t, filepath.Join(dir+".old", "usage.jsonl")); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("old file: %v", got)
	}
}

const envKill9Path = "SLUICE_JSONL_KILL9_PATH"

// TestKill9: every line whose Append returned nil before a SIGKILL is in the
// file exactly once after it, and the file reopens clean.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	path := filepath.Join(t.TempDir(), "usage.jsonl")
	killAfter := 200 + rand.IntN(3000)
	var appended []string
	n := 0
	for _, line := range killtest.Run(t, "TestKill9Child", []string{envKill9Path + "=" + path}, func(line string) bool {
		if strings.HasPrefix(line, "a ") {
			n++
		}
		return n >= killAfter
	}) {
		if id, ok := strings.CutPrefix(line, "a "); ok {
			appended = append(appended, id)
		}
	}
	s := openT(t, path, Options{Sync: meter.SyncNone})
	s.Close()
	seen := map[string]int{}
	for _, id := range readIDs(t, path) {
		seen[id]++
		if seen[id] > 1 {
			t.Fatalf("%s twice", id)
		}
	}
	for _, id := range appended {
		if seen[id] != 1 {
			t.Fatalf("%s: Append returned nil before the kill, found %d times", id, seen[id])
		}
	}
	t.Logf("killed after %d appends; %d lines, %d torn lines cut", len(appended), len(seen), s.Stats().Repairs)
}

// TestKill9Child is the child of TestKill9; it does nothing in a normal run.
func TestKill9Child(t *testing.T) {
	path := os.Getenv(envKill9Path)
	if path == "" {
		t.Skip("only run by TestKill9")
	}
	s, err := Open(path, Options{Sync: meter.SyncNone})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for w := range 4 {
		go func() {
			for i := 0; ; i++ {
				id := "w" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
				if err := s.Append(record(id)); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				killtest.Say("a " + id)
			}
		}()
	}
	time.Sleep(2 * time.Minute)
	os.Exit(3)
}
