// Package serve runs the small HTTP servers of the commands (mock upstream,
// benchmark baselines) until they are told to stop.
package serve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Server is what UntilSignal runs: *http.Server and *gateway.Gateway.
type Server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
}

// Grace bounds the shutdown of UntilSignal's servers.
const Grace = 5 * time.Second

// UntilSignal serves srv on ln until SIGINT or SIGTERM, then shuts srv and
// also down, waiting at most Grace for requests in flight. It returns
// srv.Serve's error, or nil when the server was shut down.
func UntilSignal(srv Server, ln net.Listener, also ...Server) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Until(ctx, srv, ln, also...)
}

// Until is UntilSignal with ctx in place of the signals.
func Until(ctx context.Context, srv Server, ln net.Listener, also ...Server) error {
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		shutdown, cancel := context.WithTimeout(context.Background(), Grace)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		for _, s := range also {
			_ = s.Shutdown(shutdown)
		}
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
