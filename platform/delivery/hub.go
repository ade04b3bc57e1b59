package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"sluice/deployment/yamlfile"
	"sluice/platform/generate"
	"sluice/platform/secrets"
	"sluice/platform/store"
)

// Document is one rendered deployment version, as gateways receive it
// (upstream keys in clear).
type Document struct {
	Version int64
	// Text is the document as `sluice gateway --config` reads it
	// (deployment.Loadable).
	Text []byte
}

// Hub tracks the deployment version and renders each version once for all
// gateways. The store is the source of truth: Notify is a shortcut for
// changes made by this process, Watch catches changes made by other platform
// replicas sharing the database. Safe for concurrent use.
type Hub struct {
	store store.Store
	box   *secrets.Box
	now   func() time.Time
	log   *slog.Logger

	mu      sync.Mutex
	version int64
	changed chan struct{} // closed when version rises, then replaced
	kicked  chan struct{} // closed by Kick, then replaced

	buildMu sync.Mutex
	doc     *Document
}

// NewHub reads the current version.
func NewHub(ctx context.Context, st store.Store, box *secrets.Box, now func() time.Time, log *slog.Logger) (*Hub, error) {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Hub{store: st, box: box, now: now, log: log, changed: make(chan struct{}), kicked: make(chan struct{})}
	v, err := h.readVersion(ctx)
	if err != nil {
		return nil, err
	}
	h.version = v
	return h, nil
}

func (h *Hub) readVersion(ctx context.Context) (int64, error) {
	var v int64
	err := h.store.Read(ctx, func(tx store.Tx) (err error) {
		v, err = tx.Version(ctx)
		return err
	})
	return v, err
}

// Version is the latest version the hub knows of.
func (h *Hub) Version() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.version
}

// Notify records that version v was committed and wakes the waiters when it
// is newer than what the hub knew.
func (h *Hub) Notify(v int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v <= h.version {
		return
	}
	h.version = v
	close(h.changed)
	h.changed = make(chan struct{})
}

// Wait returns as soon as the version is above after (true), or when max
// has passed, ctx is done or Kick was called (false).
func (h *Hub) Wait(ctx context.Context, after int64, max time.Duration) (int64, bool) {
	timer := time.NewTimer(max)
	defer timer.Stop()
	h.mu.Lock()
	kicked := h.kicked
	h.mu.Unlock()
	for {
		h.mu.Lock()
		v, ch := h.version, h.changed
		h.mu.Unlock()
		if v > after {
			return v, true
		}
		select {
		case <-ch:
		case <-kicked:
			return v, false
		case <-timer.C:
			return v, false
		case <-ctx.Done():
			return v, false
		}
	}
}

// Kick ends every Wait in progress without a new version, so that waiting
// gateways recheck their tokens (after a revocation).
func (h *Hub) Kick() {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.kicked)
	h.kicked = make(chan struct{})
}

// Watch polls the store's version every interval until ctx is done, so that
// changes committed by another platform replica reach this one's waiters.
func (h *Hub) Watch(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		v, err := h.readVersion(ctx)
		if err != nil {
			if ctx.Err() == nil {
				h.log.Warn("reading the deployment version failed", "error", err)
			}
			continue
		}
		h.Notify(v)
	}
}

// Current returns the current deployment, rendered once per version.
func (h *Hub) Current(ctx context.Context) (*Document, error) {
	h.buildMu.Lock()
	defer h.buildMu.Unlock()
	v, err := h.readVersion(ctx)
	if err != nil {
		return nil, err
	}
	if h.doc != nil && h.doc.Version == v {
		return h.doc, nil
	}
	var s generate.Settings
	err = h.store.Read(ctx, func(tx store.Tx) error {
		var err error
		if v, err = tx.Version(ctx); err != nil {
			return err
		}
		s, err = LoadSettings(ctx, tx, Secrets{Box: h.box}, h.now())
		return err
	})
	if err != nil {
		return nil, err
	}
	res, err := generate.Generate(s)
	if err != nil {
		return nil, fmt.Errorf("generating deployment version %d: %w", v, err)
	}
	text, err := yamlfile.Loadable(res.Deployment)
	if err != nil {
		return nil, err
	}
	h.doc = &Document{Version: v, Text: text}
	h.Notify(v)
	return h.doc, nil
}

// Status is one gateway check-in.
type Status struct {
	Version int64
	// Result is "applied" or "failed".
	Result string
	Error  string
	// KeysLastUsed is the latest use of each key id since the last report.
	KeysLastUsed map[string]time.Time
}

// ErrRevoked is returned by Report for a revoked gateway.
var ErrRevoked = errors.New("gateway revoked")

// Report records a gateway's check-in.
func (h *Hub) Report(ctx context.Context, gatewayID string, st Status) error {
	return h.store.Write(ctx, func(tx store.Tx) error {
		g, err := tx.GetGateway(ctx, gatewayID)
		if err != nil {
			return err
		}
		if g.RevokedAt != nil {
			return ErrRevoked
		}
		if err := tx.ReportGateway(ctx, gatewayID, store.Report{Version: st.Version, Result: st.Result, Error: st.Error, At: h.now()}); err != nil {
			return err
		}
		if len(st.KeysLastUsed) > 0 {
			return tx.TouchKeys(ctx, st.KeysLastUsed)
		}
		return nil
	})
}
