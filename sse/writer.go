package sse

import (
	"bytes"
	"io"
)

// Write writes ev to w in wire form: "event: X\n" when ev.Event is set, "id: X\n"
// when ev.ID is set, one "data: " line per line of ev.Data (split on "\n"), then a
// blank line. It issues a single Write call so an event is never interleaved.
// Flushing is the caller's job.
func Write(w io.Writer, ev *Event) error {
	_, err := w.Write(Append(nil, ev))
	return err
}

// Append appends the wire form of ev (as Write produces it) to dst.
func Append(dst []byte, ev *Event) []byte {
	if ev.Event != "" {
		dst = append(dst, "event: "...)
		dst = append(dst, ev.Event...)
		dst = append(dst, '\n')
	}
	if ev.ID != "" {
		dst = append(dst, "id: "...)
		dst = append(dst, ev.ID...)
		dst = append(dst, '\n')
	}
	data := ev.Data
	for {
		i := bytes.IndexByte(data, '\n')
		dst = append(dst, "data: "...)
		if i < 0 {
			dst = append(dst, data...)
			dst = append(dst, '\n')
			break
		}
		dst = append(dst, data[:i]...)
		dst = append(dst, '\n')
		data = data[i+1:]
	}
	return append(dst, '\n')
}
