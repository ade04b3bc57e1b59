// Package ship sends the records of a gateway's spool (meter/spool) to the
// platform in batches, at least once: a batch is acknowledged in the spool
// only after the platform answered 2xx, so a crash or an outage delivers it
// again, and the platform deduplicates by record id. When the platform is
// down or refuses a batch, the shipper waits with exponential back-off and
// retries the same records; the spool keeps accepting records up to its
// bound meanwhile.
package ship

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"sluice/meter/spool"
)

// Sender delivers one batch: body is JSON lines (one record per line, as
// meter.Record.AppendJSON encodes it), which Send must not modify, nor use
// once it has returned nil (the shipper reads the next batch into it). A
// nil error means the platform stored (or had stored) every record of it.
type Sender interface {
	Send(ctx context.Context, body []byte) error
}

// ErrBatchTooLarge is a Sender's error for a batch the platform refused for
// its size (HTTP 413): the shipper then sends fewer records at a time
// instead of retrying the same batch forever.
var ErrBatchTooLarge = errors.New("the platform refused the batch as too large")

// HTTPSender posts batches to the platform's POST /api/v1/gateway/usage with
// the gateway's token.
type HTTPSender struct {
	// URL is the platform's base URL (http://host:port).
	URL, Token string
	Client     *http.Client
}

// Send posts body; any status but 2xx is an error naming it.
func (h *HTTPSender) Send(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(h.URL, "/")+"/api/v1/gateway/usage", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+h.Token)
	req.Header.Set("Content-Type", "application/x-ndjson")
	c := h.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	if resp.StatusCode == http.StatusRequestEntityTooLarge {
		return fmt.Errorf("%w: platform answered %d: %s", ErrBatchTooLarge, resp.StatusCode, bytes.TrimSpace(msg))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("platform answered %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}

// Options configure a Shipper.
type Options struct {
	// Batch is the most records sent at once (default 1000; the platform
	// takes at most 5000).
	Batch int
	// Idle is the wait after a batch shorter than Batch, or an empty spool,
	// before the next read (default 200ms): under load, records gather into
	// batches instead of each few paying a send and an Ack (the ack file's
	// write). After a full batch the next is read at once.
	Idle time.Duration
	// MinBackoff and MaxBackoff bound the wait after a failed send
	// (defaults 250ms and 30s; doubling).
	MinBackoff, MaxBackoff time.Duration
	// Timeout bounds one send (default 30s).
	Timeout time.Duration
	Logger  *slog.Logger
}

// Shipper moves records from a spool to a Sender. Run is meant for one
// goroutine; Stats is safe alongside it.
type Shipper struct {
	sp   *spool.Spool
	to   Sender
	o    Options
	sent atomic.Uint64
	errs atomic.Uint64
	// last is the batch shipOne shipped last, whose memory the next read
	// reuses (Run and Flush are never concurrent). Only a delivered batch
	// is reused: the platform answers 2xx after reading the whole body, so
	// the HTTP transport is done with it, while after an early error
	// answer it may still be writing the body (http.RoundTripper).
	last spool.Batch
	// limit is the most records the next batch holds: Options.Batch, or
	// less after the platform refused a batch as too large (halved at each
	// refusal, doubled at each delivery up to ceiling). ceiling is fewer
	// than the smallest count refused so far (Options.Batch until one is),
	// so that a shipper past a refusal does not keep growing into the next.
	limit, ceiling int
}

// New returns a shipper of sp's records to to.
func New(sp *spool.Spool, to Sender, o Options) *Shipper {
	if o.Batch <= 0 {
		o.Batch = 1000
	}
	if o.Idle <= 0 {
		o.Idle = 200 * time.Millisecond
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 250 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Shipper{sp: sp, to: to, o: o, limit: o.Batch, ceiling: o.Batch}
}

// Stats are the shipper's counters since New.
type Stats struct {
	// Sent counts the records the platform acknowledged; SendErrors the
	// failed sends.
	Sent, SendErrors uint64
}

// Stats returns the counters.
func (s *Shipper) Stats() Stats { return Stats{Sent: s.sent.Load(), SendErrors: s.errs.Load()} }

// Run ships until ctx is done.
func (s *Shipper) Run(ctx context.Context) {
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		_, full, err := s.shipOne(ctx)
		wait := s.o.Idle
		switch {
		case errors.Is(err, errSmaller):
			backoff, wait = 0, 0
		case err != nil:
			backoff = min(max(2*backoff, s.o.MinBackoff), s.o.MaxBackoff)
			wait = backoff
			s.o.Logger.Warn("usage records not shipped; retrying", "error", err, "retry_in", wait.String(),
				"pending", s.sp.Stats().Pending)
		case full:
			backoff, wait = 0, 0
		default:
			backoff = 0
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
	}
}

// Flush ships until the spool is empty, a send fails or ctx is done (the
// final attempt at shutdown).
func (s *Shipper) Flush(ctx context.Context) error {
	for {
		n, _, err := s.shipOne(ctx)
		if errors.Is(err, errSmaller) {
			continue
		}
		if err != nil || n == 0 {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// errSmaller is shipOne's report that the platform refused a batch as too
// large and the next one is smaller: it is sent at once, without back-off.
var errSmaller = errors.New("batch refused as too large; retrying smaller")

// shipOne sends the oldest batch and acknowledges it; it returns the number
// of records shipped (0: the spool was empty) and whether the batch was
// full (more may be waiting).
func (s *Shipper) shipOne(ctx context.Context) (int, bool, error) {
	b, err := s.sp.NextReusing(s.last, s.limit)
	s.last = spool.Batch{}
	if err != nil {
		return 0, false, err
	}
	if b.Len() == 0 {
		s.last = b
		return 0, false, nil
	}
	full := b.Len() >= s.limit
	sctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	err = s.to.Send(sctx, b.Lines())
	cancel()
	if err != nil {
		s.errs.Add(1)
		if errors.Is(err, ErrBatchTooLarge) && b.Len() > 1 {
			s.ceiling = min(s.ceiling, b.Len()-1)
			s.limit = max(1, b.Len()/2)
			s.o.Logger.Warn("usage batch refused as too large; sending fewer records at a time",
				"records", b.Len(), "next", s.limit, "bytes", len(b.Lines()))
			return 0, false, errSmaller
		}
		return 0, false, err
	}
	s.limit = min(2*s.limit, s.ceiling)
	if err := s.sp.Ack(b); err != nil && !errors.Is(err, spool.ErrClosed) {
		return 0, false, fmt.Errorf("acknowledging %d shipped records: %w", b.Len(), err)
	}
	s.sent.Add(uint64(b.Len()))
	s.last = b
	return b.Len(), full, nil
}
