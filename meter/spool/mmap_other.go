//go:build !linux

package spool

import "os"

// Outside Linux the active segment is written with pwrite(2): a frame is in
// the kernel before Append returns, as with the mapping on Linux, at the
// cost of a system call per write.

// mapSegment maps nothing: frames are written through f.
func mapSegment(*os.File, int64) ([]byte, error) { return nil, nil }

func unmapSegment([]byte) error { return nil }

// writeFrames writes frames to f at off with one pwrite(2).
func writeFrames(f *os.File, _ []byte, off int64, frames []byte) error {
	_, err := f.WriteAt(frames, off)
	return err
}

// cutFrames removes whatever a failed writeFrames left after used bytes.
func cutFrames(f *os.File, used, _ int64) error { return f.Truncate(used) }

// mappedSegments: a frame's write is a pwrite(2).
const mappedSegments = false
