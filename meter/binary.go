package meter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unsafe"
)

// The record's compact binary encoding, for storage inside the gateway (the
// spool's segments, meter/spool): a third of the JSON encoding's bytes and
// a fraction of its encoding time, on the request path. It never leaves
// the gateway: what is shipped, written to JSON lines or served is the
// JSON encoding (AppendJSON), and AppendJSONFromBinary turns one into the
// other byte for byte.
//
// Layout: a little-endian uint32 bit set of the fields present (bit i:
// field i of the list below, in the order of the Record struct), then each
// present field in that order: a string as a uvarint length and its bytes
// (as they are: AppendJSON replaces invalid UTF-8 when it encodes them), a
// number (token counts, cost, status, timings, attempts, UsageSource,
// Resolution) as a zig-zag varint, Time as a zig-zag varint of Unix
// microseconds (the JSON encoding's precision). A field is absent when it
// is zero, except ID, Time and Resolution, which are always present.
//
// Compatibility: the encoding has no version of its own. A reader knows it
// from its container (the spool's segment header); a change of the layout
// is a new container version, and fields are only appended to the list.
const (
	binID = iota
	binClientRequestID
	binTime
	binGatewayID
	binRoute
	binProvider
	binApplication
	binKeyID
	binRequestedModel
	binServedModel
	binPromptTokens
	binCachedTokens
	binCacheWriteTokens
	binCompletionTokens
	binReasoningTokens
	binUsageSource
	binCostMicroUSD
	binPriceVersion
	binResolution
	binDeniedBy
	binErrorCode
	binStatus
	binLatencyMicros
	binTTFTMicros
	binAttempts
	numBinFields
)

// binRequired are the fields every encoding holds.
const binRequired = 1<<binID | 1<<binTime | 1<<binResolution

// AppendBinary appends the record's binary encoding to dst and returns the
// extended buffer. It allocates nothing beyond growing dst.
func (r *Record) AppendBinary(dst []byte) []byte {
	start := len(dst)
	e := binEncoder{dst: append(dst, 0, 0, 0, 0), present: binRequired}
	e.dst = appendBinString(e.dst, r.ID)
	e.str(binClientRequestID, r.ClientRequestID)
	e.dst = binary.AppendVarint(e.dst, r.Time.UnixMicro())
	e.str(binGatewayID, r.GatewayID)
	e.str(binRoute, r.Route)
	e.str(binProvider, r.Provider)
	e.str(binApplication, r.Application)
	e.str(binKeyID, r.KeyID)
	e.str(binRequestedModel, r.RequestedModel)
	e.str(binServedModel, r.ServedModel)
	e.int(binPromptTokens, r.PromptTokens)
	e.int(binCachedTokens, r.CachedTokens)
	e.int(binCacheWriteTokens, r.CacheWriteTokens)
	e.int(binCompletionTokens, r.CompletionTokens)
	e.int(binReasoningTokens, r.ReasoningTokens)
	e.int(binUsageSource, int64(r.UsageSource))
	e.int(binCostMicroUSD, r.CostMicroUSD)
	e.str(binPriceVersion, r.PriceVersion)
	e.dst = binary.AppendVarint(e.dst, int64(r.Resolution))
	e.str(binDeniedBy, r.DeniedBy)
	e.str(binErrorCode, r.ErrorCode)
	e.int(binStatus, int64(r.Status))
	e.int(binLatencyMicros, r.LatencyMicros)
	e.int(binTTFTMicros, r.TTFTMicros)
	e.int(binAttempts, int64(r.Attempts))
	binary.LittleEndian.PutUint32(e.dst[start:], e.present)
	return e.dst
}

// binEncoder appends the optional fields of AppendBinary: a zero value is
// left out and its bit clear.
type binEncoder struct {
	dst     []byte
	present uint32
}

func (e *binEncoder) str(bit int, s string) {
	if s != "" {
		e.present |= 1 << bit
		e.dst = appendBinString(e.dst, s)
	}
}

func (e *binEncoder) int(bit int, n int64) {
	if n != 0 {
		e.present |= 1 << bit
		e.dst = binary.AppendVarint(e.dst, n)
	}
}

func appendBinString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// AppendJSONFromBinary appends the JSON encoding (AppendJSON) of the record
// whose binary encoding is bin to dst, allocating nothing beyond growing
// dst. It refuses, leaving dst as it was, a truncated encoding or bytes
// after it, unknown fields, a missing or empty ID, a missing Time or
// Resolution, and unknown Resolution or UsageSource values, as Decode
// refuses their JSON counterparts.
func AppendJSONFromBinary(dst, bin []byte) ([]byte, error) {
	var r Record
	// The record is encoded and dropped before this function returns, and
	// bin is not modified meanwhile: its strings may point into bin.
	if err := decodeBinary(bin, &r); err != nil {
		return dst, err
	}
	return r.AppendJSON(dst), nil
}

var errBinaryShort = errors.New("meter: binary record: truncated")

// decodeBinary parses data, AppendBinary's encoding, into r. r's strings
// point into data: they are valid while data is, and data must not be
// modified meanwhile.
func decodeBinary(data []byte, r *Record) error {
	if len(data) < 4 {
		return errBinaryShort
	}
	d := binDecoder{data: data[4:], present: binary.LittleEndian.Uint32(data)}
	if unknown := d.present &^ (1<<numBinFields - 1); unknown != 0 {
		return fmt.Errorf("meter: binary record: unknown fields %#x", unknown)
	}
	if d.present&binRequired != binRequired {
		return errors.New("meter: binary record: id, ts or resolution missing")
	}
	r.ID = d.string(binID)
	r.ClientRequestID = d.string(binClientRequestID)
	r.Time = time.UnixMicro(d.int(binTime)).UTC()
	r.GatewayID = d.string(binGatewayID)
	r.Route = d.string(binRoute)
	r.Provider = d.string(binProvider)
	r.Application = d.string(binApplication)
	r.KeyID = d.string(binKeyID)
	r.RequestedModel = d.string(binRequestedModel)
	r.ServedModel = d.string(binServedModel)
	r.PromptTokens = d.int(binPromptTokens)
	r.CachedTokens = d.int(binCachedTokens)
	r.CacheWriteTokens = d.int(binCacheWriteTokens)
	r.CompletionTokens = d.int(binCompletionTokens)
	r.ReasoningTokens = d.int(binReasoningTokens)
	usage := d.int(binUsageSource)
	r.CostMicroUSD = d.int(binCostMicroUSD)
	r.PriceVersion = d.string(binPriceVersion)
	res := d.int(binResolution)
	r.DeniedBy = d.string(binDeniedBy)
	r.ErrorCode = d.string(binErrorCode)
	status := d.int(binStatus)
	r.LatencyMicros = d.int(binLatencyMicros)
	r.TTFTMicros = d.int(binTTFTMicros)
	attempts := d.int(binAttempts)
	switch {
	case d.err != nil:
		return d.err
	case len(d.data) != 0:
		return fmt.Errorf("meter: binary record %q: %d bytes after its fields", r.ID, len(d.data))
	case r.ID == "":
		return errors.New("meter: binary record: id is empty")
	case usage < 0 || usage >= int64(numUsageSources):
		return fmt.Errorf("meter: binary record %q: unknown usage source %d", r.ID, usage)
	case res <= int64(ResolutionUnset) || res >= int64(numResolutions):
		return fmt.Errorf("meter: binary record %q: unknown resolution %d", r.ID, res)
	case int64(int(status)) != status || int64(int(attempts)) != attempts:
		return fmt.Errorf("meter: binary record %q: status or attempts out of range", r.ID)
	}
	r.UsageSource, r.Resolution = UsageSource(usage), Resolution(res)
	r.Status, r.Attempts = int(status), int(attempts)
	return nil
}

// binDecoder reads the fields of decodeBinary in order; an absent field
// reads as its zero value, and the first error is kept (later reads return
// zero values).
type binDecoder struct {
	data    []byte
	present uint32
	err     error
}

func (d *binDecoder) int(bit int) int64 {
	if d.err != nil || d.present&(1<<bit) == 0 {
		return 0
	}
	v, n := binary.Varint(d.data)
	if n <= 0 {
		d.err = errBinaryShort
		return 0
	}
	d.data = d.data[n:]
	return v
}

func (d *binDecoder) string(bit int) string {
	if d.err != nil || d.present&(1<<bit) == 0 {
		return ""
	}
	l, n := binary.Uvarint(d.data)
	if n <= 0 || l > uint64(len(d.data)-n) {
		d.err = errBinaryShort
		return ""
	}
	b := d.data[n : n+int(l)]
	s := unsafe.String(unsafe.SliceData(b), len(b))
	d.data = d.data[n+int(l):]
	return s
}
