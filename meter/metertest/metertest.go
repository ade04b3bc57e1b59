// Package metertest holds the test helpers the meter's sink packages and
// the platform's usage tests share.
// (A concurrency-safe log buffer is internal/proctest.Buffer.)
package metertest

import (
	"os"
	"sync"
	"testing"
	"time"

	"sluice/meter"
)

// Record returns a realistic settled record with the given id (about 460
// bytes encoded with an 8-character id).
func Record(id string) *meter.Record {
	return &meter.Record{
		ID:               id,
		Time:             time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC),
		GatewayID:        "gw-1",
		Route:            "openai-prod",
		Provider:         "openai",
		Application:      "app-a",
		KeyID:            "key_7f3a",
		RequestedModel:   "gpt-5-mini",
		ServedModel:      "gpt-5-mini-2025-08-07",
		PromptTokens:     1200,
		CachedTokens:     1024,
		CompletionTokens: 350,
		UsageSource:      meter.UsageProvider,
		CostMicroUSD:     1234,
		PriceVersion:     "2026-11-30",
		Resolution:       meter.Settled,
		Status:           200,
		LatencyMicros:    1_250_000,
		TTFTMicros:       310_000,
		Attempts:         1,
	}
}

// AppendQueued makes a sink batch appends: with hold held (the lock the
// sink writes under), it starts n+1 Appends at once (appendRec(0) ..
// appendRec(n)). The first to arrive leads and waits for hold in its write;
// the other n queue behind it. Once queued reports all n, it releases hold
// and returns every Append's error after all returned. The sink then has
// written the n+1 records with two writes: the leader's, and one for the n.
func AppendQueued(hold sync.Locker, queued func() int, n int, appendRec func(i int) error) []error {
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	hold.Lock()
	for i := range n + 1 {
		wg.Go(func() { errs[i] = appendRec(i) })
	}
	// Polls the queue's state: slower only on a slower machine.
	for queued() < n {
		time.Sleep(time.Millisecond)
	}
	hold.Unlock()
	wg.Wait()
	return errs
}

// FailWrites makes a sink's writes fail: it replaces *f, the file the sink
// writes to (guarded by mu), with a read-only handle on the same file, whose
// writes fail (EBADF) and write nothing, and puts the file back when the
// test ends.
func FailWrites(t testing.TB, mu sync.Locker, f **os.File) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	orig := *f
	ro, err := os.Open(orig.Name())
	if err != nil {
		t.Fatal(err)
	}
	*f = ro
	t.Cleanup(func() {
		mu.Lock()
		*f = orig
		mu.Unlock()
		ro.Close()
	})
}
