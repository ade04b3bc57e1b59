package serve

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// Until serves until its context ends, then shuts every server down and
// returns nil; a request made before the end is answered.
func TestUntilServesThenShutsDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })}
	other := &http.Server{}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- Until(ctx, srv, ln, other) }()
	resp, err := http.Get("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Fatalf("body %q", body)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Until: %v, want nil after shutdown", err)
		}
	case <-time.After(Grace + time.Second):
		t.Fatal("Until did not return after its context ended")
	}
	if err := other.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("the other server was not shut down: %v", err)
	}
}

// A Serve error other than ErrServerClosed is returned.
func TestUntilReturnsServeError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if err := Until(context.Background(), &http.Server{}, ln); err == nil {
		t.Fatal("Until on a closed listener returned nil")
	}
}
