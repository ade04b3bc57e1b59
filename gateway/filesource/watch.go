// Package filesource is the gateway's file deployment source: it watches the
// file `sluice gateway --config` serves and says when its content changed,
// so that the wiring reloads it (yamlfile.Load, then the gateway's
// build-then-swap). The platform source is gateway/pull.
package filesource

import (
	"context"
	"crypto/sha256"
	"os"
	"time"
)

// Watch polls the file at path every interval and calls onChange when its
// content differs from the last content seen (compared by SHA-256, so a touch
// that keeps the bytes is not a change and an edit within the mtime
// granularity is). The baseline is read before Watch returns; polling runs on
// a new goroutine until ctx is done, and the returned channel is closed when
// it has exited. onChange runs on that goroutine, one call at a time. A file
// that cannot be read (e.g. mid-replacement) is skipped and compared again at
// the next poll; a partially written file may be reported and then reported
// again when complete, so the callback must tolerate a bad document (Load
// fails and the caller keeps its last good deployment).
func Watch(ctx context.Context, path string, every time.Duration, onChange func()) <-chan struct{} {
	done := make(chan struct{})
	last, lastOK := digest(path)
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			sum, ok := digest(path)
			if !ok || (lastOK && sum == last) {
				continue
			}
			last, lastOK = sum, true
			if ctx.Err() != nil {
				return
			}
			onChange()
		}
	}()
	return done
}

func digest(path string) ([32]byte, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return [32]byte{}, false
	}
	return sha256.Sum256(b), true
}
