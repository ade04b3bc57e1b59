package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxLine is the longest line (without its terminator) a Reader accepts.
const DefaultMaxLine = 1 << 20

// ErrLineTooLong is returned when a line exceeds the Reader's limit. The stream
// cannot be resumed after it.
var ErrLineTooLong = errors.New("sse: line too long")

// Reader parses an SSE stream event by event. It is not safe for concurrent use.
type Reader struct {
	br      *bufio.Reader
	maxLine int
	line    []byte // reused accumulation buffer for lines longer than br's buffer
	err     error  // sticky terminal error
}

// NewReader returns a Reader over r with DefaultMaxLine.
func NewReader(r io.Reader) *Reader { return NewReaderSize(r, DefaultMaxLine) }

// NewReaderSize returns a Reader that rejects lines longer than maxLine bytes.
func NewReaderSize(r io.Reader, maxLine int) *Reader {
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	return &Reader{br: bufio.NewReaderSize(r, 16<<10), maxLine: maxLine}
}

// readLine returns the next line without its terminator (LF or CRLF). The
// returned slice is valid until the next call. At the end of input it returns the
// final unterminated line (if any) with io.EOF.
func (r *Reader) readLine() ([]byte, error) {
	r.line = r.line[:0]
	for {
		frag, err := r.br.ReadSlice('\n')
		if len(r.line)+len(frag) > r.maxLine+2 { // +2 leaves room for CRLF
			return nil, fmt.Errorf("%w (limit %d bytes)", ErrLineTooLong, r.maxLine)
		}
		switch err {
		case nil:
			var l []byte
			if len(r.line) == 0 {
				l = frag
			} else {
				r.line = append(r.line, frag...)
				l = r.line
			}
			l = l[:len(l)-1]
			if n := len(l); n > 0 && l[n-1] == '\r' {
				l = l[:n-1]
			}
			if len(l) > r.maxLine {
				return nil, fmt.Errorf("%w (limit %d bytes)", ErrLineTooLong, r.maxLine)
			}
			return l, nil
		case bufio.ErrBufferFull:
			r.line = append(r.line, frag...)
		default:
			r.line = append(r.line, frag...)
			return r.line, err
		}
	}
}

// Next returns the next event. It returns io.EOF when the stream ends cleanly
// (between events) and io.ErrUnexpectedEOF when it ends inside an event (fields
// read but no terminating blank line). Events with no fields (e.g. comment-only
// blocks) are skipped. The returned Event and its Data are owned by the caller.
func (r *Reader) Next() (*Event, error) {
	if r.err != nil {
		return nil, r.err
	}
	var (
		ev      Event
		data    []byte
		hasData bool
		started bool // any line (field or comment) of the current block was seen
		fields  bool // any field line was seen
	)
	for {
		line, err := r.readLine()
		if err != nil && err != io.EOF {
			r.err = err
			return nil, err
		}
		if err == io.EOF && len(line) == 0 {
			if started && fields {
				r.err = io.ErrUnexpectedEOF
				return nil, io.ErrUnexpectedEOF
			}
			r.err = io.EOF
			return nil, io.EOF
		}
		if len(line) == 0 {
			if fields {
				if hasData {
					ev.Data = data
				}
				return &ev, nil
			}
			started = false
			continue
		}
		started = true
		if line[0] != ':' {
			name, value := line, []byte(nil)
			if i := bytes.IndexByte(line, ':'); i >= 0 {
				name, value = line[:i], line[i+1:]
				if len(value) > 0 && value[0] == ' ' {
					value = value[1:]
				}
			}
			switch string(name) {
			case "event":
				ev.Event, fields = string(value), true
			case "data":
				if hasData {
					data = append(data, '\n')
				}
				data = append(data, value...)
				if data == nil {
					data = []byte{}
				}
				hasData, fields = true, true
			case "id":
				if bytes.IndexByte(value, 0) < 0 {
					ev.ID = string(value)
				}
				fields = true
			case "retry":
				fields = true
			}
		}
		if err == io.EOF {
			// The last line had no terminator: the event was never dispatched.
			if fields {
				r.err = io.ErrUnexpectedEOF
				return nil, io.ErrUnexpectedEOF
			}
			r.err = io.EOF
			return nil, io.EOF
		}
	}
}
