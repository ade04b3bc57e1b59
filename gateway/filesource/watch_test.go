package filesource

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deploy.yaml")
	write := func(s string) {
		t.Helper()
		// Write then rename, as editors and config management do, so no
		// poll sees a partial file.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("a")
	ctx, cancel := context.WithCancel(context.Background())
	changes := make(chan struct{}, 10)
	done := Watch(ctx, path, time.Millisecond, func() { changes <- struct{}{} })

	expectChange := func(what string) {
		t.Helper()
		select {
		case <-changes:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no change reported", what)
		}
	}
	write("b")
	expectChange("new content")

	// Same bytes, new mtime: not a change. Then a real change must be the
	// next (and only) report.
	write("b")
	if err := os.Chtimes(path, time.Now().Add(time.Hour), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	os.Remove(path) // missing for a while: skipped, not a change
	write("c")
	expectChange("content after removal")
	select {
	case <-changes:
		t.Fatal("unchanged content reported as a change")
	default:
	}

	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("watcher did not stop")
	}
}
