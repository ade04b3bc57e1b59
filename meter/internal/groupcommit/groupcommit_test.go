package groupcommit

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// recorder is a Flush that keeps what it was given, and can be held: while
// hold is set, the next Flush announces itself on entered and waits for
// release.
type recorder struct {
	mu      sync.Mutex
	batches [][]string
	fail    map[int]error // batch index -> the error of its records from n on
	failAt  map[int]int
	entered chan struct{}
	release chan struct{}
}

func (r *recorder) flush(buf []byte, ends []int) (int, error) {
	if r.entered != nil {
		r.entered <- struct{}{}
		<-r.release
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var recs []string
	start := 0
	for _, e := range ends {
		recs = append(recs, string(buf[start:e]))
		start = e
	}
	k := len(r.batches)
	r.batches = append(r.batches, recs)
	if err := r.fail[k]; err != nil {
		return r.failAt[k], err
	}
	return len(ends), nil
}

func encoder(rec string) func([]byte) ([]byte, error) {
	return func(dst []byte) ([]byte, error) { return append(dst, rec...), nil }
}

// waitQueued waits until n records are queued behind the write under way.
// It polls the group's state, not the clock's speed: it only waits longer on
// a slow machine.
func waitQueued(t *testing.T, g *Group, n int) {
	t.Helper()
	for g.Queued() < n {
		time.Sleep(time.Millisecond)
	}
}

func TestLoneAppendWritesAtOnce(t *testing.T) {
	r := &recorder{}
	g := New(r.flush)
	for i := range 3 {
		if err := g.Append(encoder(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	want := [][]string{{"0"}, {"1"}, {"2"}}
	if !slices.EqualFunc(r.batches, want, slices.Equal) {
		t.Fatalf("batches %q, want %q", r.batches, want)
	}
}

// TestOneWriteCoversTheQueuedAppends: while one write is under way, the
// Appends that arrive are queued and written together by one Flush, and each
// returns only after that Flush.
func TestOneWriteCoversTheQueuedAppends(t *testing.T) {
	tests := []struct {
		name    string
		fail    error
		failAt  int   // records of the second batch written before fail
		wantErr []int // indexes in the second batch whose Append fails
	}{
		{name: "ok"},
		{name: "write fails", fail: errors.New("disk full"), failAt: 0, wantErr: []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{name: "partly written", fail: errors.New("disk full"), failAt: 3, wantErr: []int{3, 4, 5, 6, 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const n = 8
			r := &recorder{
				entered: make(chan struct{}), release: make(chan struct{}),
				fail: map[int]error{1: tt.fail}, failAt: map[int]int{1: tt.failAt},
			}
			g := New(r.flush)
			first := make(chan error, 1)
			go func() { first <- g.Append(encoder("lead")) }()
			<-r.entered

			errs := make([]error, n)
			var returned sync.WaitGroup
			for i := range n {
				returned.Go(func() { errs[i] = g.Append(encoder(fmt.Sprintf("r%d;", i))) })
			}
			waitQueued(t, g, n)
			select {
			case err := <-first:
				t.Fatalf("the leading Append returned before its write ended: %v", err)
			default:
			}
			r.release <- struct{}{} // the first write ends
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			<-r.entered // the second write, led by one of the queued Appends
			r.release <- struct{}{}
			returned.Wait()

			if len(r.batches) != 2 || len(r.batches[1]) != n {
				t.Fatalf("batches %q, want [lead] and then %d records in one", r.batches, n)
			}
			// The record of Append i is the second batch's k-th: map errors
			// to positions in the batch.
			var failed []int
			for k, rec := range r.batches[1] {
				var i int
				fmt.Sscanf(rec, "r%d;", &i)
				if errs[i] != nil {
					if !errors.Is(errs[i], tt.fail) {
						t.Errorf("Append %d: %v, want %v", i, errs[i], tt.fail)
					}
					failed = append(failed, k)
				}
			}
			if !slices.Equal(failed, tt.wantErr) && !(len(failed) == 0 && len(tt.wantErr) == 0) {
				t.Errorf("failed positions %v, want %v", failed, tt.wantErr)
			}
		})
	}
}

func TestEncodeErrorSkipsTheRecord(t *testing.T) {
	r := &recorder{}
	g := New(r.flush)
	bad := errors.New("too large")
	err := g.Append(func(dst []byte) ([]byte, error) { return append(dst, "partial"...), bad })
	if !errors.Is(err, bad) {
		t.Fatalf("Append: %v, want %v", err, bad)
	}
	if err := g.Append(encoder("ok")); err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"ok"}}; !slices.EqualFunc(r.batches, want, slices.Equal) {
		t.Fatalf("batches %q, want %q", r.batches, want)
	}
}

// TestConcurrentAppends: every record is written exactly once, in one of
// the batches, whatever the interleaving (run with -race).
func TestConcurrentAppends(t *testing.T) {
	const goroutines, each = 16, 200
	var mu sync.Mutex
	var all bytes.Buffer
	writes := 0
	g := New(func(buf []byte, ends []int) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		writes++
		all.Write(buf)
		return len(ends), nil
	})
	var wg sync.WaitGroup
	for w := range goroutines {
		wg.Go(func() {
			for i := range each {
				if err := g.Append(encoder(fmt.Sprintf("%d-%d\n", w, i))); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, line := range bytes.Split(bytes.TrimSuffix(all.Bytes(), []byte("\n")), []byte("\n")) {
		if seen[string(line)] {
			t.Fatalf("record %s written twice", line)
		}
		seen[string(line)] = true
	}
	if len(seen) != goroutines*each {
		t.Fatalf("%d records written, want %d", len(seen), goroutines*each)
	}
	t.Logf("%d records in %d writes", len(seen), writes)
}

func TestAppendUncontendedAllocatesNothing(t *testing.T) {
	g := New(func(buf []byte, ends []int) (int, error) { return len(ends), nil })
	rec := []byte("record")
	enc := func(dst []byte) ([]byte, error) { return append(dst, rec...), nil }
	g.Append(enc)
	if n := testing.AllocsPerRun(100, func() { g.Append(enc) }); n != 0 {
		t.Fatalf("%v allocations per Append, want 0", n)
	}
}
