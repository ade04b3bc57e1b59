package meter

import (
	"fmt"
	"time"
)

// Sink stores records. meter/spool.Spool and meter/jsonl.Sink implement it.
//
// Contract: Append is safe for concurrent use and is called on the request
// path, so it never waits for the network or for free space; a nil error
// means the record was handed to the kernel (it survives the process being
// killed; whether it survives a power loss depends on the sink's SyncMode).
// Append does not retain r.
type Sink interface {
	Append(r *Record) error
}

// SyncMode is when a file sink calls fsync(2). Every mode hands each record
// to the kernel with write(2) before Append returns, so an appended record
// survives kill -9 of the gateway in every mode; the modes differ only in
// what survives a power loss or a kernel crash.
type SyncMode uint8

const (
	// SyncInterval fsyncs the written data every Options.SyncInterval (in the
	// background, never on the request path): a power loss loses at most the
	// records of the last interval. The default.
	SyncInterval SyncMode = iota
	// SyncNone never fsyncs; the kernel writes the data back when it likes
	// (Linux: within about 30 s). A power loss may lose that much.
	SyncNone
	// SyncAlways fsyncs before Append returns: nothing acknowledged is lost
	// even on power loss, at the cost of one fsync per record on the request
	// path.
	SyncAlways
)

// DefaultSyncInterval is SyncInterval's period when none is configured.
const DefaultSyncInterval = time.Second

func (m SyncMode) String() string {
	switch m {
	case SyncNone:
		return "none"
	case SyncAlways:
		return "always"
	}
	return "interval"
}

// ParseSyncMode reads "none", "interval" or "always" ("" is interval).
func ParseSyncMode(s string) (SyncMode, error) {
	switch s {
	case "", "interval":
		return SyncInterval, nil
	case "none":
		return SyncNone, nil
	case "always":
		return SyncAlways, nil
	}
	return 0, fmt.Errorf("unknown sync mode %q (want none, interval or always)", s)
}
