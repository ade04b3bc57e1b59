package ship

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

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
			sp, err := spool.Open(t.TempDir(), spool.Options{Sync: meter.SyncNone})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sp.Close() })
			var want strings.Builder
			for i := range tt.n {
				r := metertest.Record(fmt.Sprintf("r%03d", i))
				if err := sp.Append(r); err != nil {
					t.Fatal(err)
				}
				want.Write(append(r.AppendJSON(nil), '\n'))
			}
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
			if got := strings.Join(to.bodies, ""); got != want.String() {
				t.Errorf("sent %q\nwant %q", got, want.String())
			}
			if st, s := sp.Stats(), sh.Stats(); st.Pending != 0 || s.Sent != uint64(tt.n) {
				t.Errorf("spool %+v, shipper %+v: want all sent and acknowledged", st, s)
			}
		})
	}
}
