package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sluice/deployment"
	"sluice/meter"
	"sluice/meter/jsonl"
	"sluice/meter/ship"
	"sluice/meter/spool"
)

// MeterOptions say where a gateway's usage records go by default; the
// deployment's meter section decides within them.
type MeterOptions struct {
	// Platform, when set, ships the spool's records to the platform: the
	// default sink of a gateway whose deployment comes from the platform.
	Platform ship.Sender
	// SpoolDir is the spool's directory when meter.spool.dir is not set.
	SpoolDir string
	// SpoolMaxBytes is the spool's bound when meter.spool.maxBytes is not
	// set (0: spool.DefaultMaxBytes).
	SpoolMaxBytes int64
	// GatewayID names the gateway in its records ("": the platform fills in
	// the sending token's gateway).
	GatewayID string
}

// flushTimeout bounds the final shipping attempt at Close.
const flushTimeout = 5 * time.Second

// meterSink opens the sink d's meter section selects (nil for none) and
// registers its owned shutdown: stop the shipper, one last flush within
// flushTimeout, close the files.
func (g *Gateway) meterSink(d *deployment.Deployment, s *Services, o MeterOptions) (meter.Sink, error) {
	m := d.Meter
	sink := m.Sink
	if sink == "" {
		switch {
		case o.Platform != nil:
			sink = deployment.MeterSinkPlatform
		case m.JSONL.Path != "":
			sink = deployment.MeterSinkJSONL
		default:
			sink = deployment.MeterSinkNone
		}
	}
	sync, err := meter.ParseSyncMode(m.Sync)
	if err != nil {
		return nil, fmt.Errorf("meter.sync: %w", err)
	}
	log := s.Logger.With("component", "meter")
	switch sink {
	case deployment.MeterSinkNone:
		return nil, nil
	case deployment.MeterSinkJSONL:
		f, err := jsonl.Open(m.JSONL.Path, jsonl.Options{Sync: sync, Logger: log})
		if err != nil {
			return nil, err
		}
		g.owned = append(g.owned, f.Close)
		log.Info("usage records to a JSON lines file", "path", m.JSONL.Path, "sync", sync.String())
		return f, nil
	}
	if o.Platform == nil {
		return nil, errors.New("meter.sink: platform needs a gateway whose deployment comes from the platform (sluice gateway --platform or sluice serve)")
	}
	dir := m.Spool.Dir
	if dir == "" {
		dir = o.SpoolDir
	}
	if dir == "" {
		return nil, errors.New("meter.spool.dir: the platform sink needs a spool directory")
	}
	maxBytes := m.Spool.MaxBytes
	if maxBytes == 0 {
		maxBytes = o.SpoolMaxBytes
	}
	sp, err := spool.Open(dir, spool.Options{MaxBytes: maxBytes, Sync: sync, Logger: log})
	if err != nil {
		return nil, err
	}
	sh := ship.New(sp, o.Platform, ship.Options{Logger: log})
	registerMeterMetrics(s.Metrics, sp, sh)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sh.Run(ctx)
	}()
	g.owned = append(g.owned, func() error {
		cancel()
		<-done
		fctx, fcancel := context.WithTimeout(context.Background(), flushTimeout)
		defer fcancel()
		if err := sh.Flush(fctx); err != nil {
			log.Warn("usage records left in the spool at shutdown; they are shipped at the next start", "pending", sp.Stats().Pending, "error", err)
		}
		return sp.Close()
	})
	log.Info("usage records shipped to the platform", "spool", dir, "max_bytes", sp.MaxBytes(), "sync", sync.String())
	return sp, nil
}

// registerMeterMetrics exposes the spool's and the shipper's counters.
func registerMeterMetrics(reg *prometheus.Registry, sp *spool.Spool, sh *ship.Shipper) {
	counter := func(name, help string, f func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
	}
	gauge := func(name, help string, f func() int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
	}
	for _, c := range []prometheus.Collector{
		counter("sluice_meter_spool_appended_total", "Usage records appended to the spool.", func() uint64 { return sp.Stats().Appended }),
		counter("sluice_meter_spool_dropped_records_total", "Usage records dropped unshipped because the spool reached its bound (each drop is logged).", func() uint64 { return sp.Stats().DroppedRecords }),
		counter("sluice_meter_spool_append_errors_total", "Failed spool appends (I/O errors).", func() uint64 { return sp.Stats().AppendErrors }),
		counter("sluice_meter_spool_writes_total", "Writes that appended usage records to the spool (copies into the memory-mapped segment on Linux; concurrent appends share one).", func() uint64 { return sp.Stats().Writes }),
		gauge("sluice_meter_spool_pending_records", "Usage records in the spool not acknowledged by the platform yet.", func() int64 { return sp.Stats().Pending }),
		gauge("sluice_meter_spool_bytes", "Bytes written to the spool's segment files (not the active segment's preallocated, unwritten part).", func() int64 { return sp.Stats().Bytes }),
		counter("sluice_meter_shipped_records_total", "Usage records the platform acknowledged.", func() uint64 { return sh.Stats().Sent }),
		counter("sluice_meter_ship_errors_total", "Failed sends of usage batches to the platform (retried).", func() uint64 { return sh.Stats().SendErrors }),
	} {
		_ = reg.Register(c)
	}
}
