//go:build linux

package spool

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"syscall"
)

// On Linux the active segment is extended to its capacity with ftruncate(2)
// (sparse: the disk holds only what was written) and mapped MAP_SHARED, so
// appending frames is a copy into the page cache with no system call. The
// page cache keeps a mapped page when the process dies, as it keeps the data
// of a write(2): a frame copied before Append returned survives kill -9. The
// page cache is coherent between the mapping and read(2), so Next reads the
// segment with pread. fsync(2) writes back the mapping's dirty pages (as
// msync(2) would), so the sync modes are unchanged.

// mapSegment extends f, a segment holding its header and frames, to
// capacity (the bytes after what was written read as zeros: the end of the
// frames) and maps it for writing.
func mapSegment(f *os.File, capacity int64) ([]byte, error) {
	if err := f.Truncate(capacity); err != nil {
		return nil, err
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, int(capacity), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return m, nil
}

// unmapSegment removes the mapping of mapSegment (nil: none).
func unmapSegment(m []byte) error {
	if m == nil {
		return nil
	}
	return syscall.Munmap(m)
}

// errFault reports a fault while copying into the mapping: the disk was full
// when a page got its block (the kernel sends SIGBUS), or the file was
// truncated behind the spool's back.
var errFault = errors.New("fault writing to the mapped segment (disk full?)")

// writeFrames copies frames into the mapping m of f at off. A fault is
// turned into an error (debug.SetPanicOnFault) instead of killing the
// process; the caller then cuts what may have been copied (cutFrames).
func writeFrames(_ *os.File, m []byte, off int64, frames []byte) (err error) {
	if off < 0 || off+int64(len(frames)) > int64(len(m)) {
		return fmt.Errorf("frames of %d bytes at offset %d overflow the segment's mapping of %d", len(frames), off, len(m))
	}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(interface{ Addr() uintptr }); !ok {
				panic(r)
			}
			err = fmt.Errorf("%w: %v", errFault, r)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	copy(m[off:], frames)
	return nil
}

// cutFrames removes whatever a failed writeFrames left after used bytes:
// truncating the file frees those pages, extending it again gives zeros
// (the end of the frames) in the mapping.
func cutFrames(f *os.File, used, capacity int64) error {
	if err := f.Truncate(used); err != nil {
		return err
	}
	return f.Truncate(capacity)
}

// mappedSegments: a frame's write is a copy into the mapping, no system call.
const mappedSegments = true
