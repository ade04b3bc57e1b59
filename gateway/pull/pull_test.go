package pull

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"sluice/deployment"
	"sluice/policies/policytest"
)

// fakeFeed serves versions set by the test and records the polls and reports.
type fakeFeed struct {
	mu      sync.Mutex
	cur     *Update
	down    bool
	changed chan struct{}
	afters  []int64
	reports []Status
}

func newFakeFeed() *fakeFeed { return &fakeFeed{changed: make(chan struct{})} }

func (f *fakeFeed) set(u *Update, down bool) {
	f.mu.Lock()
	f.cur, f.down = u, down
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

func (f *fakeFeed) Next(ctx context.Context, after int64, wait time.Duration) (*Update, error) {
	f.mu.Lock()
	f.afters = append(f.afters, after)
	f.mu.Unlock()
	deadline := time.After(wait)
	for {
		f.mu.Lock()
		cur, down, ch := f.cur, f.down, f.changed
		f.mu.Unlock()
		if down {
			return nil, errors.New("connection refused")
		}
		if cur != nil && cur.Version > after {
			return cur, nil
		}
		select {
		case <-ch:
		case <-deadline:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (f *fakeFeed) Report(ctx context.Context, s Status) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return errors.New("connection refused")
	}
	f.reports = append(f.reports, s)
	return nil
}

func (f *fakeFeed) lastReport() Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reports) == 0 {
		return Status{}
	}
	return f.reports[len(f.reports)-1]
}

func doc(route string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: sluice/v1
providers: [{name: p, type: openai, url: "http://127.0.0.1:9"}]
routes: [{name: %s, context: /%s, provider: p}]
`, route, route))
}

// eventually polls cond for up to 10s (the loops run on their own goroutines).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestSourceAppliesReportsAndSurvivesOutages(t *testing.T) {
	feed := newFakeFeed()
	feed.set(&Update{Version: 1, Document: doc("r1")}, false)
	cache, err := NewCache(filepath.Join(t.TempDir(), "cache"), "tok")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var applied []string
	src := &Source{Feed: feed, Cache: cache, Wait: 200 * time.Millisecond, ReportEvery: 20 * time.Millisecond, Backoff: time.Millisecond,
		Apply: func(d *deployment.Deployment) error {
			mu.Lock()
			defer mu.Unlock()
			if d.Routes[0].Name == "bad" {
				return errors.New("refused by the gateway")
			}
			applied = append(applied, d.Routes[0].Name)
			return nil
		}}
	d, u, cached, err := src.Initial(context.Background(), time.Second)
	if err != nil || cached || d.Routes[0].Name != "r1" {
		t.Fatalf("initial: %v %v %v", d, cached, err)
	}
	src.Started(u, cached)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	appliedNames := func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprint(applied)
	}

	feed.set(&Update{Version: 2, Document: doc("r2")}, false)
	eventually(t, "v2 applied and reported", func() bool {
		r := feed.lastReport()
		return src.Version() == 2 && r.Version == 2 && r.Result == "applied"
	})
	// A version the gateway refuses is reported failed and not fetched again.
	feed.set(&Update{Version: 3, Document: doc("bad")}, false)
	eventually(t, "v3 reported failed", func() bool {
		r := feed.lastReport()
		return r.Version == 3 && r.Result == "failed" && r.Error == "refused by the gateway"
	})
	if src.Version() != 2 {
		t.Fatalf("serving v%d after a refused v3", src.Version())
	}
	time.Sleep(50 * time.Millisecond)
	feed.mu.Lock()
	n := 0
	for _, a := range feed.afters {
		if a == 2 {
			n++
		}
	}
	feed.mu.Unlock()
	if n > 3 {
		t.Fatalf("the refused version was polled for %d times", n)
	}
	// Outage: keeps serving v2; on recovery it resyncs (after=0) and applies.
	feed.set(nil, true)
	time.Sleep(30 * time.Millisecond)
	if src.Version() != 2 {
		t.Fatal("an outage changed what is served")
	}
	feed.set(&Update{Version: 4, Document: doc("r4")}, false)
	eventually(t, "v4 after the outage", func() bool { return src.Version() == 4 })
	feed.mu.Lock()
	sawResync := false
	for _, a := range feed.afters {
		sawResync = sawResync || a == 0
	}
	feed.mu.Unlock()
	if !sawResync {
		t.Fatal("no full resync (after=0) after the outage")
	}
	if got := appliedNames(); got != "[r2 r4]" {
		t.Fatalf("applied %s", got)
	}
	// The cache holds v4; a restart with the platform down serves it.
	feed.set(nil, true)
	src2 := &Source{Feed: feed, Cache: cache, Backoff: time.Millisecond}
	d, u, cached, err = src2.Initial(context.Background(), 50*time.Millisecond)
	if err != nil || !cached || u.Version != 4 || d.Routes[0].Name != "r4" {
		t.Fatalf("restart from cache: %+v %v %v", u, cached, err)
	}
}

func TestCacheIsSealedWithTheToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "cache")
	c, _ := NewCache(path, "token-a")
	secret := []byte("value: Bearer sk-upstream-SECRET\n")
	if err := c.Save(&Update{Version: 7, Document: secret}); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 || len(raw) == 0 || containsBytes(raw, []byte("SECRET")) {
		t.Fatalf("mode %v, clear text %v", fi.Mode().Perm(), containsBytes(raw, []byte("SECRET")))
	}
	u, err := c.Load()
	if err != nil || u.Version != 7 || string(u.Document) != string(secret) {
		t.Fatalf("load: %+v %v", u, err)
	}
	other, _ := NewCache(path, "token-b")
	if _, err := other.Load(); err == nil {
		t.Fatal("another token opened the cache")
	}
}

func containsBytes(b, sub []byte) bool {
	for i := 0; i+len(sub) <= len(b); i++ {
		if string(b[i:i+len(sub)]) == string(sub) {
			return true
		}
	}
	return false
}

func TestKeyUsage(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	u := NewKeyUsage(func() time.Time { return now })
	idx := u.Wrap(policytest.Keys{sha256.Sum256([]byte("k")): {ApplicationID: "a", KeyID: "key-1"}})
	if _, ok := idx.Lookup(sha256.Sum256([]byte("nope"))); ok {
		t.Fatal("unknown key found")
	}
	idx.Lookup(sha256.Sum256([]byte("k")))
	got := u.Drain()
	if len(got) != 1 || !got["key-1"].Equal(now) {
		t.Fatalf("drain %v", got)
	}
	if again := u.Drain(); len(again) != 0 {
		t.Fatalf("second drain %v", again)
	}
	u.Restore(got)
	now = now.Add(time.Minute)
	idx.Lookup(sha256.Sum256([]byte("k")))
	u.Restore(got) // older than the new use: ignored
	if d := u.Drain(); !d["key-1"].Equal(now) {
		t.Fatalf("after restore %v", d)
	}
}
