package ship

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/meter"
	"sluice/meter/metertest"
	"sluice/meter/spool"
)

// recorder is a Sender that keeps every body, failing while fail is set.
type recorder struct {
	mu     sync.Mutex
	bodies []string
	fail   bool
}

func (r *recorder) Send(_ context.Context, body []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return errors.New("platform down")
	}
	r.bodies = append(r.bodies, string(body))
	return nil
}

// TestFlush: Flush sends the spool's records as JSON lines in batches of
// at most Batch, in order, and acknowledges them; a failed send keeps them.
func TestFlush(t *testing.T) {
	tests := []struct {
		name    string
		n       int
		batch   int
		batches int
	}{
		{name: "empty spool", n: 0, batch: 10, batches: 0},
		{name: "one short batch", n: 5, batch: 10, batches: 1},
		{name: "full batches and a short one", n: 25, batch: 10, batches: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp, want := filled(t, tt.n)
			to := &recorder{fail: true}
			sh := New(sp, to, Options{Batch: tt.batch})
			if err := sh.Flush(context.Background()); tt.n > 0 && err == nil {
				t.Fatal("Flush with the platform down returned nil")
			}
			if st := sp.Stats(); st.Pending != int64(tt.n) {
				t.Fatalf("after a failed send %d pending, want %d", st.Pending, tt.n)
			}
			to.fail = false
			if err := sh.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			if len(to.bodies) != tt.batches {
				t.Errorf("%d sends, want %d", len(to.bodies), tt.batches)
			}
			for i, b := range to.bodies {
				if n := strings.Count(b, "\n"); n > tt.batch {
					t.Errorf("send %d holds %d records, batch is %d", i, n, tt.batch)
				}
			}
			if got := strings.Join(to.bodies, ""); got != want {
				t.Errorf("sent %q\nwant %q", got, want)
			}
			if st, s := sp.Stats(), sh.Stats(); st.Pending != 0 || s.Sent != uint64(tt.n) {
				t.Errorf("spool %+v, shipper %+v: want all sent and acknowledged", st, s)
			}
		})
	}
}

// filled is a spool holding records r000..r(n-1), and the JSON lines a
// platform should receive for them.
func filled(t *testing.T, n int) (*spool.Spool, string) {
	t.Helper()
	sp, err := spool.Open(t.TempDir(), spool.Options{Sync: meter.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	var want strings.Builder
	for i := range n {
		r := metertest.Record(fmt.Sprintf("r%03d", i))
		if err := sp.Append(r); err != nil {
			t.Fatal(err)
		}
		want.Write(append(r.AppendJSON(nil), '\n'))
	}
	return sp, want.String()
}

// sizeLimited is a platform that refuses, as too large, a batch of more
// than max records, and keeps the bodies it takes.
type sizeLimited struct {
	recorder
	max, refused int
}

func (s *sizeLimited) Send(ctx context.Context, body []byte) error {
	if strings.Count(string(body), "\n") > s.max {
		s.refused++
		return fmt.Errorf("%w: 413", ErrBatchTooLarge)
	}
	return s.recorder.Send(ctx, body)
}

// TestBatchRefusedAsTooLarge: a batch the platform refuses for its size is
// sent again in halves until it is taken, so the shipper never retries the
// same batch forever; every record arrives once, in order.
func TestBatchRefusedAsTooLarge(t *testing.T) {
	sp, want := filled(t, 40)
	to := &sizeLimited{max: 3}
	sh := New(sp, to, Options{Batch: 16})
	if err := sh.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(to.bodies, ""); got != want {
		t.Errorf("sent %d bytes, want every record once, in order", len(got))
	}
	for i, b := range to.bodies {
		if n := strings.Count(b, "\n"); n > 3 {
			t.Errorf("send %d holds %d records", i, n)
		}
	}
	if st := sp.Stats(); st.Pending != 0 || to.refused == 0 {
		t.Errorf("pending %d, refusals %d", st.Pending, to.refused)
	}
	// Halved at each refusal, and never grown back to a count refused:
	// 16, 8 and 4 are refused once each, then batches of 2 and 3 go.
	if to.refused != 3 {
		t.Errorf("%d refusals for %d deliveries", to.refused, len(to.bodies))
	}
}

// TestHTTPSenderTooLarge: the platform's 413 is ErrBatchTooLarge; any other
// refusal is not.
func TestHTTPSenderTooLarge(t *testing.T) {
	for _, tt := range []struct {
		status int
		large  bool
	}{{http.StatusRequestEntityTooLarge, true}, {http.StatusBadRequest, false}, {http.StatusServiceUnavailable, false}} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "no", tt.status)
		}))
		err := (&HTTPSender{URL: srv.URL, Token: "t"}).Send(context.Background(), []byte("{}\n"))
		srv.Close()
		if err == nil || errors.Is(err, ErrBatchTooLarge) != tt.large {
			t.Errorf("status %d: error %v, want too large %v", tt.status, err, tt.large)
		}
	}
}

// TestRunAfterRefusalKeepsPace: once batches are smaller than Batch after
// a refusal, Run still reads the next at once after a full one (full of
// the smaller count) instead of idling between them.
func TestRunAfterRefusalKeepsPace(t *testing.T) {
	sp, _ := filled(t, 40)
	to := &sizeLimited{max: 3}
	sh := New(sp, to, Options{Batch: 16, Idle: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sh.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(10 * time.Second); sp.Stats().Pending > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d records still pending: Run idled between smaller full batches", sp.Stats().Pending)
		}
	}
}
