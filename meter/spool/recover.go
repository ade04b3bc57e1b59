package spool

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// recover loads the spool directory: it deletes the segments the ack file
// says are acknowledged, scans every other segment (truncating a torn tail at
// its last whole frame), places the cursor, and reopens the newest segment
// for appending when it has room.
func (s *Spool) recover() error {
	// An earlier version replaced the ack file by write-rename; a crash may
	// have left its temporary file.
	if err := os.Remove(filepath.Join(s.dir, ackFileName+".tmp")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("spool: %w", err)
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	var seqs []uint64
	for _, e := range entries {
		if seq, ok := parseSegmentName(e.Name()); ok && e.Type().IsRegular() {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	ack, haveAck := s.readAck()

	newest := ack.seq
	cursorSet := false
	for _, seq := range seqs {
		newest = max(newest, seq)
		if haveAck && seq < ack.seq {
			// Acknowledged; a crash came between the ack and the delete.
			if err := os.Remove(s.segmentPath(seq)); err != nil {
				return fmt.Errorf("spool: %w", err)
			}
			continue
		}
		target := int64(-1)
		if haveAck && seq == ack.seq {
			target = ack.off
		}
		seg, boundary, err := s.scanSegment(seq, target)
		if err != nil {
			return err
		}
		if seg.size == 0 {
			continue // a segment torn before its header was complete: removed
		}
		s.segs = append(s.segs, seg)
		s.total += seg.size
		s.records += seg.records
		if target >= 0 {
			s.cursor, cursorSet = boundary, true
		}
	}
	switch {
	case len(s.segs) == 0:
		s.cursor = position{seq: newest + 1, off: segmentHeaderSize}
	case !cursorSet:
		s.cursor = position{seq: s.segs[0].seq, off: segmentHeaderSize}
	}
	for _, seq := range s.trimAckedLocked() {
		if err := os.Remove(s.segmentPath(seq)); err != nil {
			return fmt.Errorf("spool: %w", err)
		}
	}
	if n := len(s.segs); n > 0 && s.segs[n-1].size < s.opt.SegmentBytes && !s.segs[n-1].json {
		f, err := os.OpenFile(s.segmentPath(s.segs[n-1].seq), os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("spool: %w", err)
		}
		m, err := mapSegment(f, s.capacity())
		if err != nil {
			f.Close()
			return fmt.Errorf("spool: %w", err)
		}
		s.f, s.m = f, m
	}
	if s.stats.Repairs > 0 || len(s.segs) > 0 {
		s.log.Info("spool: opened", "dir", s.dir, "segments", len(s.segs), "bytes", s.total,
			"pending", s.records-s.cursor.n, "repairs", s.stats.Repairs, "repaired_bytes", s.stats.RepairedBytes)
	}
	return nil
}

// readAck reads the ack file. A missing file means nothing was acknowledged;
// an unreadable one is logged and treated the same (records are delivered
// again, never lost).
func (s *Spool) readAck() (position, bool) {
	path := filepath.Join(s.dir, ackFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return position{}, false
	}
	if err == nil {
		if p, ok := parseAck(b); ok {
			return p, true
		}
		err = fmt.Errorf("malformed content %q", b)
	}
	s.log.Warn("spool: ignoring the ack file, delivering again from the oldest segment", "path", path, "err", err)
	return position{}, false
}

// parseAck reads "<segment> <offset>\n" (writeAck pads both numbers with
// zeros; an earlier version did not).
func parseAck(b []byte) (position, bool) {
	line, ok := strings.CutSuffix(string(b), "\n")
	if !ok {
		return position{}, false
	}
	seqText, offText, ok := strings.Cut(line, " ")
	if !ok {
		return position{}, false
	}
	seq, err1 := strconv.ParseUint(seqText, 10, 64)
	off, err2 := strconv.ParseInt(offText, 10, 64)
	if err1 != nil || err2 != nil || seq == 0 || off < segmentHeaderSize {
		return position{}, false
	}
	return position{seq: seq, off: off}, true
}

// scanSegment reads every frame of segment seq, up to a zero length or a
// damaged frame, and truncates the file after the last whole one: zeros to
// the end of the file (a preallocated segment) end the frames; anything else
// there is a torn tail, counted and logged. With target >= 0 it also returns the last frame
// boundary at or before target (the acknowledged position). A file shorter
// than the header that holds a prefix of it (a crash while creating the
// segment) is removed and reported with size 0; a file with another header
// is an error: the directory holds something that is not a spool.
func (s *Spool) scanSegment(seq uint64, target int64) (segment, position, error) {
	path := s.segmentPath(seq)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return segment{}, position{}, fmt.Errorf("spool: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return segment{}, position{}, fmt.Errorf("spool: %w", err)
	}
	size := st.Size()
	var magic [segmentHeaderSize]byte
	n, err := io.ReadFull(f, magic[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return segment{}, position{}, fmt.Errorf("spool: %w", err)
	}
	json := bytes.HasPrefix(segmentMagicJSON[:], magic[:n])
	if !json && !bytes.HasPrefix(segmentMagic[:], magic[:n]) {
		return segment{}, position{}, fmt.Errorf("spool: %s is not a spool segment (bad header)", path)
	}
	if n < segmentHeaderSize {
		s.stats.Repairs++
		s.stats.RepairedBytes += uint64(size)
		s.log.Warn("spool: removing a segment torn while it was created", "path", path, "bytes", size)
		if err := os.Remove(path); err != nil {
			return segment{}, position{}, fmt.Errorf("spool: %w", err)
		}
		return segment{}, position{}, nil
	}

	seg := segment{seq: seq, size: segmentHeaderSize, json: json && n == segmentHeaderSize}
	boundary := position{seq: seq, off: segmentHeaderSize}
	r := bufio.NewReaderSize(io.NewSectionReader(f, segmentHeaderSize, size-segmentHeaderSize), defaultBatchReadBuf)
	var hdr [frameHeaderSize]byte
	var buf []byte
	var frameErr error
	for seg.size < size {
		payload, err := readFrame(r, &hdr, buf[:0])
		if err != nil {
			frameErr = err
			break
		}
		buf = payload
		seg.size += int64(frameHeaderSize + len(payload))
		seg.records++
		if target >= 0 && seg.size <= target {
			boundary = position{seq: seq, off: seg.size, n: seg.records}
		}
	}
	if seg.size < size {
		// Zeros after the frames are a preallocated segment's unwritten
		// part: cut, never counted. What is torn ends at the last non-zero
		// byte.
		torn, err := dataEnd(f, seg.size, size)
		if err != nil {
			return segment{}, position{}, fmt.Errorf("spool: %w", err)
		}
		if err := f.Truncate(seg.size); err != nil {
			return segment{}, position{}, fmt.Errorf("spool: cutting the tail of %s: %w", path, err)
		}
		if torn == seg.size {
			s.warnAckBoundary(path, target, boundary)
			return seg, boundary, nil
		}
		size = torn
		s.stats.Repairs++
		s.stats.RepairedBytes += uint64(size - seg.size)
		s.log.Warn("spool: cut a torn tail", "path", path, "offset", seg.size, "bytes", size-seg.size,
			"records_kept", seg.records, "reason", frameErr)
	}
	s.warnAckBoundary(path, target, boundary)
	return seg, boundary, nil
}

// warnAckBoundary logs an acknowledged position (target >= 0) that is not
// the frame boundary found before it: the records after the boundary are
// delivered again.
func (s *Spool) warnAckBoundary(path string, target int64, boundary position) {
	if target >= 0 && boundary.off != target {
		s.log.Warn("spool: the acknowledged position is not a record boundary, delivering again from the one before it",
			"path", path, "acked_offset", target, "offset", boundary.off)
	}
}

// dataEnd returns the offset after the last non-zero byte of f in [off,
// end), off when there is none.
func dataEnd(f *os.File, off, end int64) (int64, error) {
	last := off
	buf := make([]byte, min(end-off, defaultBatchReadBuf))
	for off < end {
		n, err := f.ReadAt(buf[:min(end-off, int64(len(buf)))], off)
		for i := n - 1; i >= 0; i-- {
			if buf[i] != 0 {
				last = off + int64(i) + 1
				break
			}
		}
		if err != nil {
			return 0, err
		}
		off += int64(n)
	}
	return last, nil
}
