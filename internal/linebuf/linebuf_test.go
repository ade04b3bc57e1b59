package linebuf

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder keeps every Write call it got.
type recorder struct {
	mu     sync.Mutex
	writes []string
	err    error
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return 0, r.err
	}
	r.writes = append(r.writes, string(p))
	return len(p), nil
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.writes...)
}

func TestWriter(t *testing.T) {
	cases := []struct {
		name  string
		size  int
		lines []string
		// want are the underlying writes before Close, then after it.
		before, after []string
	}{
		{name: "buffered until close", size: 64, lines: []string{"a\n", "b\n"}, before: nil, after: []string{"a\nb\n"}},
		{name: "flushed before a line that does not fit", size: 6, lines: []string{"aa\n", "bb\n", "cc\n"},
			before: []string{"aa\nbb\n"}, after: []string{"aa\nbb\n", "cc\n"}},
		{name: "a line larger than the buffer goes through whole", size: 4, lines: []string{"a\n", "longline\n"},
			before: []string{"a\n", "longline\n"}, after: []string{"a\n", "longline\n"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			w := New(rec, tc.size, time.Hour)
			for _, l := range tc.lines {
				if n, err := w.Write([]byte(l)); n != len(l) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", l, n, err)
				}
			}
			if got := rec.all(); strings.Join(got, "|") != strings.Join(tc.before, "|") {
				t.Errorf("before Close: %q, want %q", got, tc.before)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if got := rec.all(); strings.Join(got, "|") != strings.Join(tc.after, "|") {
				t.Errorf("after Close: %q, want %q", got, tc.after)
			}
		})
	}
}

// The interval flushes without a Close; concurrent lines stay whole.
func TestWriterIntervalAndConcurrency(t *testing.T) {
	rec := &recorder{}
	w := New(rec, 1<<10, 10*time.Millisecond)
	defer w.Close()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = w.Write([]byte(strings.Repeat(string(rune('a'+g)), 20) + "\n"))
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var all bytes.Buffer
		for _, s := range rec.all() {
			all.WriteString(s)
		}
		lines := strings.Split(strings.TrimSuffix(all.String(), "\n"), "\n")
		if len(lines) == 400 {
			for _, l := range lines {
				if len(l) != 20 || strings.Count(l, l[:1]) != 20 {
					t.Fatalf("line torn: %q", l)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 400 lines written by the interval flush", len(lines))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWriterError(t *testing.T) {
	rec := &recorder{err: errors.New("disk full")}
	w := New(rec, 64, time.Hour)
	_, _ = w.Write([]byte("x\n"))
	if err := w.Flush(); err == nil {
		t.Fatal("Flush hid the write error")
	}
	if err := w.Flush(); err != nil {
		t.Fatalf("the error is reported once: %v", err)
	}
	_ = w.Close()
}
