package deployment

import "strings"

// Meter is where the gateway stores the usage record of every request
// (docs/meter.md, docs/configuration.md#meter). It is read when the gateway
// starts: a reload that changes it is served with the running sinks.
type Meter struct {
	// Sink is platform (a spool shipped to the platform), jsonl (a JSON lines
	// file), or none. Empty: platform for a gateway whose deployment comes
	// from the platform, jsonl when jsonl.path is set, else none.
	Sink string `yaml:"sink"`
	// Sync is when the sink's file is fsynced: interval (default, every
	// second), none or always.
	Sync string `yaml:"sync"`
	// Spool is the platform sink's on-disk spool.
	Spool MeterSpool `yaml:"spool"`
	// JSONL is the jsonl sink's file.
	JSONL MeterJSONL `yaml:"jsonl"`
	// AccessLog is on (default: one line per request at info, in the
	// process's log format) or off.
	AccessLog string `yaml:"accessLog"`
}

// MeterSpool configures the spool of the platform sink.
type MeterSpool struct {
	// Dir is the spool's directory (default: beside the gateway's
	// deployment cache, or in the platform's data directory for sluice
	// serve).
	Dir string `yaml:"dir"`
	// MaxBytes bounds the spool's files (default 256 MiB): past it the
	// oldest records are dropped, counted and logged.
	MaxBytes int64 `yaml:"maxBytes"`
}

// MeterJSONL configures the jsonl sink.
type MeterJSONL struct {
	// Path is the JSON lines file.
	Path string `yaml:"path"`
}

// Meter sinks.
const (
	MeterSinkPlatform = "platform"
	MeterSinkJSONL    = "jsonl"
	MeterSinkNone     = "none"
)

// minSpoolBytes is the smallest spool bound: two segments of 4 KiB and two
// records of 64 KiB (meter/spool).
const minSpoolBytes = 2*64<<10 + 2*4<<10

func validateMeter(d *Deployment, add func(*Error)) {
	m := d.Meter
	switch m.Sink {
	case "", MeterSinkPlatform, MeterSinkNone:
	case MeterSinkJSONL:
		if strings.TrimSpace(m.JSONL.Path) == "" {
			add(d.ErrorAt("meter.jsonl.path", true, "the jsonl sink needs meter.jsonl.path"))
		}
	default:
		add(d.ErrorAt("meter.sink", false, "unknown sink %q: want platform, jsonl or none", m.Sink))
	}
	switch m.Sync {
	case "", "interval", "none", "always":
	default:
		add(d.ErrorAt("meter.sync", false, "unknown sync mode %q: want interval, none or always", m.Sync))
	}
	switch m.AccessLog {
	case "", "on", "off":
	default:
		add(d.ErrorAt("meter.accessLog", false, "unknown value %q: want on or off", m.AccessLog))
	}
	if b := m.Spool.MaxBytes; b != 0 && b < minSpoolBytes {
		add(d.ErrorAt("meter.spool.maxBytes", false, "must be at least %d bytes", minSpoolBytes))
	}
}
