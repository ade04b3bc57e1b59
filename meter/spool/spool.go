// Package spool is the gateway's bounded on-disk spool of usage records: the
// request path appends records, a shipper reads them in batches, sends them to
// the platform and acknowledges them; acknowledged segments are deleted.
//
// On disk, a spool is a directory of segment files (000000000001.seg, ...),
// an ack file (the position after the last acknowledged record, rewritten
// in place: writeAck) and a lock file (one process at a time). A segment starts
// with an 8-byte magic and holds frames:
//
//	length  uint32, little endian: payload bytes (1..MaxRecordBytes)
//	crc     uint32, little endian: CRC-32C of the length bytes and the payload
//	payload the record's binary encoding (meter.Record.AppendBinary)
//
// The magic says what the payloads are: "SLSPOOL2", the binary encoding (a
// third of the JSON's bytes, so a third of the page faults, disk and
// fsync per record, and a fifth of the encoding time on the request path);
// "SLSPOOL1", the JSON encoding, as earlier versions wrote it. Both are
// read, and Next turns either into JSON; only SLSPOOL2 is written (Open
// does not append to an SLSPOOL1 segment, it starts a new one).
//
// Guarantees:
//
// The active segment is preallocated: on Linux it is extended to its
// capacity (sparse) and memory-mapped, and frames are copied into the
// mapping (mmap_linux.go); a zero length marks the end of the frames. A
// sealed segment is truncated to its frames.
//
//   - A record for which Append returned nil survives kill -9 of the process:
//     its frame was in the page cache (copied into the shared mapping, or
//     handed to the kernel by a write(2) outside Linux) before Append
//     returned. Options.Sync decides what survives a power loss.
//   - Open repairs what a crash left: a torn tail (a partial frame, a bad
//     CRC, bytes after the zero length that ends the frames) is truncated at
//     the last whole frame, counted (Stats.Repairs) and logged; no earlier
//     record is lost. Zeros after the last frame (a preallocated segment)
//     are the end of the frames, not a repair.
//   - At least once: Next returns records from the oldest unacknowledged one;
//     after a crash, the records after the last durable Ack are returned
//     again. The platform deduplicates by record id.
//   - Bounded: the segments' frames (bytes written, headers included, not the
//     preallocated zeros) never exceed Options.MaxBytes. When an Append
//     would pass the bound, the oldest segments are deleted even if
//     unacknowledged; their records and bytes are counted (Stats.Dropped*)
//     and each drop is logged at warn. Append never waits for the shipper.
package spool

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"sluice/meter"
	"sluice/meter/internal/filesync"
	"sluice/meter/internal/groupcommit"
)

// MaxRecordBytes is the largest payload a frame holds; Append refuses a
// larger record (ErrTooLarge) and Open treats a larger length as a torn frame.
const MaxRecordBytes = 64 << 10

// Defaults of Options.
const (
	DefaultMaxBytes     = 256 << 20
	maxDefaultSegment   = 16 << 20
	minSegmentBytes     = 4 << 10
	segmentHeaderSize   = 8
	frameHeaderSize     = 8
	segmentSuffix       = ".seg"
	ackFileName         = "ack"
	lockFileName        = "lock"
	segmentNameDigits   = 12
	defaultBatchReadBuf = 64 << 10
	// maxPooledFrame is the largest buffer appendOne keeps for reuse.
	maxPooledFrame = 16 << 10
	// jsonPerBinaryByte is about how many bytes of JSON a byte of a binary
	// frame becomes (3-3.5 for the records of the tests and benchmarks,
	// frame headers included), for sizing Next's buffer.
	jsonPerBinaryByte = 4
)

// segmentMagic starts every segment written; segmentMagicJSON starts the
// segments of earlier versions, whose frames hold JSON.
var (
	segmentMagic     = [segmentHeaderSize]byte{'S', 'L', 'S', 'P', 'O', 'O', 'L', '2'}
	segmentMagicJSON = [segmentHeaderSize]byte{'S', 'L', 'S', 'P', 'O', 'O', 'L', '1'}
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors.
var (
	ErrClosed   = errors.New("spool: closed")
	ErrTooLarge = errors.New("spool: record larger than MaxRecordBytes")
)

// errEndOfFrames is a zero frame length: in a preallocated segment, the end
// of what was written.
var errEndOfFrames = errors.New("frame length 0: the end of the frames")

// Options configure a spool. The zero value is valid: 256 MiB, SyncInterval
// every second, no logging.
type Options struct {
	// MaxBytes bounds the segment files' total size (default 256 MiB). It
	// must hold at least two segments and two records of MaxRecordBytes.
	MaxBytes int64
	// SegmentBytes is the size at which the segment being written is closed
	// and a new one started (default MaxBytes/16, at most 16 MiB; at least
	// 4 KiB). Dropping works by whole segments, so a drop loses at most
	// about one segment's records.
	SegmentBytes int64
	// Sync is when written data is fsynced (see meter.SyncMode). It also
	// applies to the ack file: only SyncAlways fsyncs it (writeAck).
	Sync meter.SyncMode
	// SyncInterval is SyncInterval's period (default meter.DefaultSyncInterval).
	SyncInterval time.Duration
	// Logger receives repairs, drops and I/O errors (nil: discarded).
	Logger *slog.Logger
}

// Stats are the spool's counters and gauges. Counters count since Open.
type Stats struct {
	// Appended counts the records Append accepted.
	Appended uint64
	// AppendErrors counts the Append calls that failed (I/O errors,
	// ErrTooLarge).
	AppendErrors uint64
	// Writes counts the writes that appended frames (copies into the
	// mapped segment on Linux, pwrite(2) calls elsewhere): concurrent
	// Appends share one.
	Writes uint64
	// Acked counts the records acknowledged.
	Acked uint64
	// Pending is the number of records on disk not acknowledged yet.
	Pending int64
	// Bytes is the bytes written to the segment files (headers and frames,
	// not the active segment's preallocated zeros); Segments their number.
	Bytes    int64
	Segments int
	// Drops counts the segments deleted because of MaxBytes while holding
	// unacknowledged records; DroppedRecords and DroppedBytes count those
	// records and their frames' bytes.
	Drops          uint64
	DroppedRecords uint64
	DroppedBytes   uint64
	// Repairs counts the torn tails truncated at Open; RepairedBytes the
	// bytes cut.
	Repairs       uint64
	RepairedBytes uint64
	// Corrupt counts the frames Next found damaged after Open (the rest of
	// their segment is skipped and logged), and the whole frames that held
	// no record (skipped alone, logged).
	Corrupt uint64
	// SyncErrors counts failed fsyncs.
	SyncErrors uint64
}

// position is a frame boundary: the segment, the byte offset in it, and the
// number of frames before that offset in that segment.
type position struct {
	seq uint64
	off int64
	n   int64
}

func (p position) after(q position) bool {
	return p.seq > q.seq || (p.seq == q.seq && p.off > q.off)
}

// Batch is a run of consecutive records returned by Next. Records[i] is the
// JSON encoding of one meter.Record (meter.Decode reads it), whatever the
// segment holds; the slices are the batch's own and stay valid after Ack.
type Batch struct {
	Records [][]byte
	lines   []byte
	end     position
}

// Len is the number of records in the batch.
func (b Batch) Len() int { return len(b.Records) }

// Lines is the batch as JSON lines: every record followed by a newline, the
// bytes Records point into (the batch's own; do not modify them).
func (b Batch) Lines() []byte { return b.lines }

type segment struct {
	seq     uint64
	size    int64 // through the last whole frame, header included
	records int64
	json    bool // an earlier version's segment: its payloads are JSON
}

// Spool is an open spool directory.
//
// Concurrency: Append is safe for concurrent use: the frames of the Appends
// that arrive while a write is under way are written together, in the order
// they were encoded, by the next write(2) (one per segment they go to); Next
// and Ack are safe for concurrent use with Append and with each other, and
// are meant for one shipper goroutine. Stats and Close may be called at any
// time.
type Spool struct {
	dir  string
	opt  Options
	log  *slog.Logger
	lock *os.File
	// gc gathers the frames of concurrent Appends into one write where a
	// write is a system call (outside Linux) or is followed by an fsync
	// (SyncAlways); nil otherwise, and frames holds appendOne's buffers.
	gc     *groupcommit.Group
	frames sync.Pool

	// mu guards everything below, up to readMu.
	mu      sync.Mutex
	closed  bool
	segs    []segment // oldest first; the last is active when f != nil
	f       *os.File  // the active segment, opened for reading and writing
	m       []byte    // the active segment's mapping (nil outside Linux)
	total   int64     // sum of segs' sizes
	records int64     // sum of segs' records
	cursor  position  // oldest unacknowledged record; cursor.seq == segs[0].seq
	stats   Stats

	// readMu serialises Next; ackMu serialises Ack and guards ackf and
	// ackBuf.
	readMu sync.Mutex
	rf     *os.File // the segment Next read last
	rfSeq  uint64
	br     *bufio.Reader // Next's read buffer
	ends   []int         // Next's scratch: where each record ends
	frame  []byte        // Next's scratch: a binary payload
	ackMu  sync.Mutex
	ackf   *os.File // the ack file, open for writing (nil until the first Ack)
	ackBuf []byte

	syncer *filesync.Syncer // SyncInterval only
}

// Open opens the spool in dir, creating it, and repairs what a crash left
// (see the package comment). Only one process at a time may open a spool.
func Open(dir string, opt Options) (*Spool, error) {
	if err := opt.defaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	lock, err := lockDir(filepath.Join(dir, lockFileName))
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	s := &Spool{dir: dir, opt: opt, log: opt.Logger, lock: lock}
	if mappedSegments && opt.Sync != meter.SyncAlways {
		s.frames.New = func() any { b := make([]byte, 0, 1024); return &b }
	} else {
		s.gc = groupcommit.New(s.flush)
	}
	if err := s.recover(); err != nil {
		s.closeFiles()
		return nil, err
	}
	if opt.Sync == meter.SyncInterval {
		s.syncer = filesync.Start(opt.SyncInterval, func(err error) {
			s.mu.Lock()
			s.stats.SyncErrors++
			s.mu.Unlock()
			s.log.Error("spool: fsync", "dir", s.dir, "err", err)
		})
	}
	return s, nil
}

func (o *Options) defaults() error {
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.SegmentBytes == 0 {
		o.SegmentBytes = max(min(o.MaxBytes/16, maxDefaultSegment), minSegmentBytes)
	}
	if o.SyncInterval <= 0 {
		o.SyncInterval = meter.DefaultSyncInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.SegmentBytes < minSegmentBytes:
		return fmt.Errorf("spool: SegmentBytes %d is below the minimum of %d", o.SegmentBytes, minSegmentBytes)
	case o.MaxBytes < 2*o.SegmentBytes:
		return fmt.Errorf("spool: MaxBytes %d must hold two segments of SegmentBytes %d", o.MaxBytes, o.SegmentBytes)
	case o.MaxBytes < 2*(segmentHeaderSize+frameHeaderSize+MaxRecordBytes):
		return fmt.Errorf("spool: MaxBytes %d must hold two records of MaxRecordBytes %d", o.MaxBytes, MaxRecordBytes)
	}
	return nil
}

// capacity is the size the active segment is preallocated to: SegmentBytes,
// or one frame of MaxRecordBytes when larger (a segment's first frame goes
// in whatever its size).
func (s *Spool) capacity() int64 {
	return max(s.opt.SegmentBytes, segmentHeaderSize+frameHeaderSize+MaxRecordBytes)
}

// Append writes r to the active segment. It returns once the frame is in the
// page cache (and fsynced, with SyncAlways). When the spool is full it
// first deletes the oldest segments; it never waits for the shipper.
func (s *Spool) Append(r *meter.Record) error {
	encode := func(dst []byte) ([]byte, error) {
		start := len(dst)
		var hdr [frameHeaderSize]byte
		dst = r.AppendBinary(append(dst, hdr[:]...))
		if n := len(dst) - start - frameHeaderSize; n > MaxRecordBytes {
			return dst, fmt.Errorf("%w: %d bytes (record %q)", ErrTooLarge, n, r.ID)
		}
		putFrameHeader(dst[start:])
		return dst, nil
	}
	var err error
	if s.gc != nil {
		err = s.gc.Append(encode)
	} else {
		err = s.appendOne(encode)
	}
	if errors.Is(err, ErrTooLarge) {
		s.mu.Lock()
		s.stats.AppendErrors++
		s.mu.Unlock()
	}
	return err
}

// appendOne encodes one frame outside the lock, into a pooled buffer, and
// copies it into the active segment. It serves Appends when a frame's write
// is a copy into the mapping with no fsync (Linux, sync none or interval):
// gathering concurrent frames (groupcommit) would save no system call there
// and would only make Appends wait for one another.
func (s *Spool) appendOne(encode func([]byte) ([]byte, error)) error {
	bp := s.frames.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledFrame {
			s.frames.Put(bp)
		}
	}()
	buf, err := encode((*bp)[:0])
	*bp = buf
	if err != nil {
		return err
	}
	ends := [1]int{len(buf)}
	_, err = s.flush(buf, ends[:])
	return err
}

// flush writes a batch of frames (groupcommit.Flush), keeping the bound and
// the rotation exactly as for Appends one at a time: frames that go, one
// after the other, to the active segment with no rotation and no drop
// (fitsLocked: makeRoomLocked would do nothing for them) are written by one
// write; before any other frame, the frames so far are written and
// makeRoomLocked runs for that frame alone.
func (s *Spool) flush(buf []byte, ends []int) (int, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, ErrClosed
	}
	n, drops, err := s.flushLocked(buf, ends)
	s.stats.Appended += uint64(n)
	if err != nil {
		s.stats.AppendErrors += uint64(len(ends) - n)
	}
	s.mu.Unlock()
	s.logDrops(drops)
	return n, err
}

// flushLocked writes the frames of buf (frame i ends at ends[i]) and returns
// how many were written, from the first. The frames first..i-1, buf[off:],
// are the run not written yet.
func (s *Spool) flushLocked(buf []byte, ends []int) (int, []drop, error) {
	var drops []drop
	first, off := 0, 0
	for i := 0; ; i++ {
		start := off
		if i > 0 {
			start = ends[i-1]
		}
		if i < len(ends) && i > first && s.fitsLocked(int64(start-off), int64(ends[i]-start)) {
			continue
		}
		if i > first {
			if err := s.writeLocked(buf[off:start], i-first); err != nil {
				return first, drops, err
			}
			first, off = i, start
		}
		if i == len(ends) {
			return i, drops, nil
		}
		d, err := s.makeRoomLocked(int64(ends[i] - start))
		drops = append(drops, d...)
		if err != nil {
			return i, drops, err
		}
	}
}

// fitsLocked reports whether a frame of need bytes, after run bytes of
// frames (at least one) not written yet, goes to the active segment with no
// rotation and no drop.
func (s *Spool) fitsLocked(run, need int64) bool {
	return s.f != nil &&
		s.segs[len(s.segs)-1].size+run+need <= s.opt.SegmentBytes &&
		s.total+run+need <= s.opt.MaxBytes
}

// putFrameHeader fills the length and CRC of the frame in b (header, then
// payload).
func putFrameHeader(b []byte) {
	binary.LittleEndian.PutUint32(b[0:4], uint32(len(b)-frameHeaderSize))
	crc := crc32.Update(crc32.Update(0, castagnoli, b[0:4]), castagnoli, b[frameHeaderSize:])
	binary.LittleEndian.PutUint32(b[4:8], crc)
}

// drop describes a segment deleted to keep the bound.
type drop struct {
	seq            uint64
	records, bytes int64
}

// makeRoomLocked rotates the active segment when the frame does not fit in
// it, and deletes the oldest segments until need more bytes fit under
// MaxBytes.
func (s *Spool) makeRoomLocked(need int64) ([]drop, error) {
	if s.f != nil && s.segs[len(s.segs)-1].records > 0 && s.segs[len(s.segs)-1].size+need > s.opt.SegmentBytes {
		s.sealLocked()
	}
	var drops []drop
	for s.total+need+s.headerIfNewLocked() > s.opt.MaxBytes {
		if len(s.segs) == 1 && s.f != nil {
			// Only the active segment is left: close it so it can go too.
			// The bounds Options.defaults enforces make this unreachable;
			// it keeps the loop finite whatever the sizes.
			s.sealLocked()
		}
		drops = append(drops, s.dropOldestLocked())
	}
	return drops, s.ensureActiveLocked()
}

// headerIfNewLocked is the header size a new segment will add when there is
// no active one.
func (s *Spool) headerIfNewLocked() int64 {
	if s.f == nil {
		return segmentHeaderSize
	}
	return 0
}

// dropOldestLocked deletes the oldest segment, which is sealed, and moves the
// cursor past it.
func (s *Spool) dropOldestLocked() drop {
	seg := s.segs[0]
	d := drop{seq: seg.seq, records: seg.records - s.cursor.n, bytes: seg.size - s.cursor.off}
	s.removeHeadLocked()
	if d.records > 0 {
		s.stats.Drops++
		s.stats.DroppedRecords += uint64(d.records)
		s.stats.DroppedBytes += uint64(d.bytes)
	}
	if err := os.Remove(s.segmentPath(seg.seq)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Error("spool: deleting a dropped segment", "dir", s.dir, "segment", seg.seq, "err", err)
	}
	return d
}

// removeHeadLocked forgets segs[0] and puts the cursor at the start of the
// next segment (or of a segment yet to be created).
func (s *Spool) removeHeadLocked() {
	seg := s.segs[0]
	s.segs = slices.Delete(s.segs, 0, 1)
	s.total -= seg.size
	s.records -= seg.records
	next := seg.seq + 1
	if len(s.segs) > 0 {
		next = s.segs[0].seq
	}
	s.cursor = position{seq: next, off: segmentHeaderSize}
}

func (s *Spool) logDrops(drops []drop) {
	for _, d := range drops {
		if d.records == 0 {
			continue
		}
		st := s.Stats()
		s.log.Warn("spool: full, dropped the oldest segment with unacknowledged records",
			"dir", s.dir, "segment", d.seq, "records", d.records, "bytes", d.bytes,
			"max_bytes", s.opt.MaxBytes, "dropped_records_total", st.DroppedRecords)
	}
}

// writeLocked writes frames, the given number of whole frames, to the
// active segment in one write (writeFrames).
func (s *Spool) writeLocked(frames []byte, records int) error {
	active := &s.segs[len(s.segs)-1]
	s.stats.Writes++
	if err := writeFrames(s.f, s.m, active.size, frames); err != nil {
		seq := active.seq
		if cerr := cutFrames(s.f, active.size, s.capacity()); cerr != nil {
			// The partial frame may stay on disk; the segment ends, in
			// memory, before it (Open cuts it) and the next record goes to
			// a new segment.
			s.log.Error("spool: cutting a partial write", "dir", s.dir, "segment", seq, "err", cerr)
			s.sealLocked()
		}
		return fmt.Errorf("spool: writing segment %d: %w", seq, err)
	}
	n := len(frames)
	active.size += int64(n)
	active.records += int64(records)
	s.total += int64(n)
	s.records += int64(records)
	switch s.opt.Sync {
	case meter.SyncAlways:
		if err := s.f.Sync(); err != nil {
			s.stats.SyncErrors++
			return fmt.Errorf("spool: fsync of segment %d: %w", active.seq, err)
		}
	case meter.SyncInterval:
		s.syncer.Wrote(s.f)
	}
	return nil
}

// sealLocked closes the active segment for writing: unmapped and truncated
// to its frames. With SyncInterval the file goes to the syncer, which fsyncs
// and closes it.
func (s *Spool) sealLocked() {
	if s.f == nil {
		return
	}
	if err := s.releaseActiveLocked(); err != nil {
		s.log.Error("spool: sealing a segment", "dir", s.dir, "err", err)
	}
	if err := s.syncer.Retire(s.f); err != nil {
		s.log.Error("spool: closing a segment", "dir", s.dir, "err", err)
	}
	s.f = nil
}

// releaseActiveLocked unmaps the active segment and truncates it to its
// frames (a failed truncate leaves zeros after them, which Open reads as
// their end).
func (s *Spool) releaseActiveLocked() error {
	err := unmapSegment(s.m)
	s.m = nil
	return errors.Join(err, s.f.Truncate(s.segs[len(s.segs)-1].size))
}

// ensureActiveLocked creates a new active segment when there is none.
func (s *Spool) ensureActiveLocked() error {
	if s.f != nil {
		return nil
	}
	seq := s.cursor.seq
	if len(s.segs) > 0 {
		seq = s.segs[len(s.segs)-1].seq + 1
	}
	f, err := os.OpenFile(s.segmentPath(seq), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return fmt.Errorf("spool: creating segment %d: %w", seq, err)
	}
	// The header first: a file torn before its header is whole is removed
	// at Open; once it is, the zeros after it are an empty segment.
	_, err = f.Write(segmentMagic[:])
	var m []byte
	if err == nil {
		m, err = mapSegment(f, s.capacity())
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("spool: creating segment %d: %w", seq, err)
	}
	switch s.opt.Sync {
	case meter.SyncAlways:
		if err := filesync.SyncDir(s.dir); err != nil {
			s.stats.SyncErrors++
			s.log.Error("spool: fsync of the directory", "dir", s.dir, "err", err)
		}
	case meter.SyncInterval:
		s.syncer.DirChanged(s.dir)
	}
	s.f, s.m = f, m
	s.segs = append(s.segs, segment{seq: seq, size: segmentHeaderSize})
	s.total += segmentHeaderSize
	if len(s.segs) == 1 {
		s.cursor = position{seq: seq, off: segmentHeaderSize}
	}
	// The segment just sealed may have been fully acknowledged already.
	s.removeAcked(s.trimAckedLocked())
	return nil
}

// Next returns up to max records from the oldest unacknowledged one, in
// append order, across segments. Without an Ack in between, the next call
// returns the same records again (plus any appended since, up to max). An
// empty batch means everything is acknowledged.
func (s *Spool) Next(max int) (Batch, error) { return s.NextReusing(Batch{}, max) }

// NextReusing is Next returning the batch in prev's memory where it fits
// (a shipper passes its last batch, once sent and acknowledged, so that a
// batch costs no allocation in the steady state). prev and its slices must
// not be used afterwards.
func (s *Spool) NextReusing(prev Batch, max int) (Batch, error) {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Batch{}, ErrClosed
	}
	pos := s.cursor
	segs := slices.Clone(s.segs)
	s.mu.Unlock()

	var b Batch
	ends := s.ends[:0]
	// At most one allocation for the batch's bytes in the common case (none
	// when prev has room): the unread records' JSON, at most max of their
	// average size; a binary frame's JSON is estimated at jsonPerBinaryByte
	// times its bytes.
	var unread, frames int64
	for _, seg := range segs {
		if seg.seq >= pos.seq {
			n := seg.size - segmentHeaderSize
			if !seg.json {
				n *= jsonPerBinaryByte
			}
			unread += n
			frames += seg.records
		}
	}
	if frames > 0 {
		unread = min(unread, int64(max)*(unread/frames+1))
	}
	data := prev.lines[:0]
	if int64(cap(data)) < unread {
		data = make([]byte, 0, unread)
	}
	for _, seg := range segs {
		if len(ends) >= max {
			break
		}
		if seg.seq < pos.seq {
			continue
		}
		if seg.seq > pos.seq {
			pos = position{seq: seg.seq, off: segmentHeaderSize}
		}
		if pos.off >= seg.size {
			continue
		}
		var err error
		data, ends, pos, err = s.readSegment(seg, pos, max, data, ends)
		if err != nil {
			return Batch{}, err
		}
	}
	s.ends = ends
	start := 0
	b.Records = prev.Records[:0]
	if cap(b.Records) < len(ends) {
		b.Records = make([][]byte, 0, len(ends))
	}
	for _, end := range ends {
		b.Records = append(b.Records, data[start:end:end])
		start = end + 1 // after the newline
	}
	b.lines = data
	b.end = pos
	return b, nil
}

// readSegment appends to data the payloads of seg from pos up to seg.size
// (at most max records in all), each followed by a newline, with the end of
// each payload in ends, and returns the position after the last one.
// A segment deleted meanwhile (dropped for the bound) is skipped; a damaged
// frame ends the segment (counted, logged).
func (s *Spool) readSegment(seg segment, pos position, max int, data []byte, ends []int) ([]byte, []int, position, error) {
	f, err := s.readerFor(seg.seq)
	if errors.Is(err, os.ErrNotExist) {
		return data, ends, position{seq: seg.seq + 1, off: segmentHeaderSize}, nil
	}
	if err != nil {
		return data, ends, pos, err
	}
	if s.br == nil {
		s.br = bufio.NewReaderSize(nil, defaultBatchReadBuf)
	}
	r := s.br
	r.Reset(io.NewSectionReader(f, pos.off, seg.size-pos.off))
	defer r.Reset(nil)
	var hdr [frameHeaderSize]byte
	for len(ends) < max && pos.off < seg.size {
		start := len(data)
		var n int // the frame's payload bytes
		var err error
		if seg.json {
			data, err = readFrame(r, &hdr, data)
			n = len(data) - start
		} else if s.frame, err = readFrame(r, &hdr, s.frame[:0]); err == nil {
			n = len(s.frame)
			var derr error
			if data, derr = meter.AppendJSONFromBinary(data, s.frame); derr != nil {
				// A whole frame (its CRC holds) that is not a record: the
				// frames after it are intact, only this one is skipped.
				s.damaged("spool: undecodable record skipped", seg.seq, pos.off, derr)
				pos.off += int64(frameHeaderSize + n)
				pos.n++
				continue
			}
		}
		if err != nil {
			s.damaged("spool: damaged record, skipping the rest of its segment", seg.seq, pos.off, err)
			return data[:start], ends, position{seq: seg.seq, off: seg.size, n: seg.records}, nil
		}
		ends = append(ends, len(data))
		pos.off += int64(frameHeaderSize + n)
		pos.n++
		data = append(data, '\n')
	}
	return data, ends, pos, nil
}

// damaged counts a frame Next could not return (Stats.Corrupt) and logs
// msg about it.
func (s *Spool) damaged(msg string, seq uint64, off int64, err error) {
	s.mu.Lock()
	s.stats.Corrupt++
	s.mu.Unlock()
	s.log.Error(msg, "dir", s.dir, "segment", seq, "offset", off, "err", err)
}

// readFrame reads one frame from r and appends its payload to dst.
func readFrame(r io.Reader, hdr *[frameHeaderSize]byte, dst []byte) ([]byte, error) {
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return dst, fmt.Errorf("frame header: %w", err)
	}
	n := binary.LittleEndian.Uint32(hdr[0:4])
	if n == 0 {
		return dst, errEndOfFrames
	}
	if n > MaxRecordBytes {
		return dst, fmt.Errorf("frame length %d out of range", n)
	}
	start := len(dst)
	dst = slices.Grow(dst, int(n))[:start+int(n)]
	if _, err := io.ReadFull(r, dst[start:]); err != nil {
		return dst[:start], fmt.Errorf("frame payload: %w", err)
	}
	crc := crc32.Update(crc32.Update(0, castagnoli, hdr[0:4]), castagnoli, dst[start:])
	if crc != binary.LittleEndian.Uint32(hdr[4:8]) {
		return dst[:start], errors.New("frame CRC mismatch")
	}
	return dst, nil
}

// readerFor returns a read handle on segment seq, reusing the last one.
func (s *Spool) readerFor(seq uint64) (*os.File, error) {
	if s.rf != nil && s.rfSeq == seq {
		return s.rf, nil
	}
	if s.rf != nil {
		s.rf.Close()
		s.rf = nil
	}
	f, err := os.Open(s.segmentPath(seq))
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	s.rf, s.rfSeq = f, seq
	return f, nil
}

// Ack records that every record of b, and every record before it, was
// delivered: the ack file is rewritten (in place, fsynced with SyncAlways:
// writeAck) before Ack returns, and fully acknowledged segments are
// deleted.
// Acknowledging a batch older than the last one acknowledged, or one whose
// records were dropped since, is a no-op.
func (s *Spool) Ack(b Batch) error {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if !b.end.after(s.cursor) {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()

	if err := s.writeAck(b.end); err != nil {
		return err
	}

	s.mu.Lock()
	var remove []uint64
	if b.end.after(s.cursor) {
		before := s.records - s.cursor.n
		for len(s.segs) > 1 && s.segs[0].seq < b.end.seq {
			remove = append(remove, s.segs[0].seq)
			s.removeHeadLocked()
		}
		if len(s.segs) > 0 && s.segs[0].seq == b.end.seq {
			s.cursor = b.end
		}
		remove = append(remove, s.trimAckedLocked()...)
		s.stats.Acked += uint64(before - (s.records - s.cursor.n))
	}
	s.mu.Unlock()
	s.removeAcked(remove)
	return nil
}

// removeAcked deletes the files of acknowledged segments. A failure is
// logged: the segment is already forgotten, and the next Open deletes it.
func (s *Spool) removeAcked(seqs []uint64) {
	for _, seq := range seqs {
		if err := os.Remove(s.segmentPath(seq)); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Error("spool: deleting an acknowledged segment", "dir", s.dir, "segment", seq, "err", err)
		}
	}
}

// trimAckedLocked forgets the sealed segments at the head that are fully
// acknowledged, and returns their numbers for deletion.
func (s *Spool) trimAckedLocked() []uint64 {
	var out []uint64
	for len(s.segs) > 1 && s.cursor.seq == s.segs[0].seq && s.cursor.off >= s.segs[0].size {
		out = append(out, s.segs[0].seq)
		s.removeHeadLocked()
	}
	return out
}

// ackWidth is the width of each number of the ack file, the digits of the
// largest uint64: the file is always one line of the same 42 bytes, so each
// write covers the whole of the one before (and of a shorter line an
// earlier version wrote by write-rename).
const ackWidth = 20

// writeAck rewrites the ack file with p: one pwrite(2) of a fixed-width line
// at offset 0, on a handle kept open, so an Ack costs one system call and
// creates no file. Only SyncAlways fsyncs it: in the other modes a power
// loss may lose the latest ack, and the records after the one that survived
// are delivered again, which the platform's deduplication absorbs, so the
// shipper pays no fsync a batch. A line the power loss tore (it lies within
// one sector, which devices write whole) reads as malformed: readAck then
// delivers again from the oldest segment, never losing a record. kill -9
// loses nothing either way (the page cache keeps the write).
func (s *Spool) writeAck(p position) error {
	durable := s.opt.Sync == meter.SyncAlways
	first := s.ackf == nil
	if first {
		f, err := os.OpenFile(filepath.Join(s.dir, ackFileName), os.O_WRONLY|os.O_CREATE, 0o640)
		if err != nil {
			return fmt.Errorf("spool: opening the ack file: %w", err)
		}
		if durable {
			if err := filesync.SyncDir(s.dir); err != nil {
				f.Close()
				return fmt.Errorf("spool: opening the ack file: %w", err)
			}
		}
		s.ackf = f
	}
	b := fmt.Appendf(s.ackBuf[:0], "%0*d %0*d\n", ackWidth, p.seq, ackWidth, p.off)
	s.ackBuf = b
	if _, err := s.ackf.WriteAt(b, 0); err != nil {
		return fmt.Errorf("spool: writing the ack file: %w", err)
	}
	if first {
		// Anything longer a file left there must not follow the line.
		if err := s.ackf.Truncate(int64(len(b))); err != nil {
			return fmt.Errorf("spool: writing the ack file: %w", err)
		}
	}
	if durable {
		if err := s.ackf.Sync(); err != nil {
			return fmt.Errorf("spool: fsync of the ack file: %w", err)
		}
	}
	return nil
}

// MaxBytes is the spool's bound (Options.MaxBytes after defaults).
func (s *Spool) MaxBytes() int64 { return s.opt.MaxBytes }

// Stats returns the current counters.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Pending = s.records - s.cursor.n
	st.Bytes = s.total
	st.Segments = len(s.segs)
	return st
}

// Close fsyncs (unless SyncNone) and closes the spool. Later calls of any
// method return ErrClosed.
func (s *Spool) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.syncer.Stop()
	// Lock order: ackMu, readMu, mu.
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	s.readMu.Lock()
	defer s.readMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.f != nil {
		err = errors.Join(s.releaseActiveLocked(), filesync.Close(s.f, s.opt.Sync != meter.SyncNone))
		s.f = nil
	}
	s.closeFiles()
	return err
}

// closeFiles closes every handle and releases the lock.
func (s *Spool) closeFiles() {
	unmapSegment(s.m)
	s.m = nil
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	if s.rf != nil {
		s.rf.Close()
		s.rf = nil
	}
	if s.ackf != nil {
		s.ackf.Close()
		s.ackf = nil
	}
	if s.lock != nil {
		unlockDir(s.lock)
		s.lock = nil
	}
}

func (s *Spool) segmentPath(seq uint64) string { return filepath.Join(s.dir, segmentName(seq)) }

// segmentName is the file name of segment seq.
func segmentName(seq uint64) string {
	return fmt.Sprintf("%0*d%s", segmentNameDigits, seq, segmentSuffix)
}

// parseSegmentName returns the number of a segment file name.
func parseSegmentName(name string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, segmentSuffix)
	if !ok || len(digits) != segmentNameDigits {
		return 0, false
	}
	seq, err := strconv.ParseUint(digits, 10, 64)
	return seq, err == nil && seq > 0
}
