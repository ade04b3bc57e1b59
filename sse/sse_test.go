package sse

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func readAll(t *testing.T, r *Reader) ([]Event, error) {
	t.Helper()
	var out []Event
	for {
		ev, err := r.Next()
		if err != nil {
			return out, err
		}
		out = append(out, *ev)
	}
}

func TestReaderNext(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Event
		wantErr error
	}{
		{"empty", "", nil, io.EOF},
		{"openai chunks and done", "data: {\"a\":1}\n\ndata: [DONE]\n\n",
			[]Event{{Data: []byte(`{"a":1}`)}, {Data: []byte("[DONE]")}}, io.EOF},
		{"crlf", "event: ping\r\ndata: x\r\n\r\n", []Event{{Event: "ping", Data: []byte("x")}}, io.EOF},
		{"multi-line data joined", "data: a\ndata: b\ndata:c\n\n", []Event{{Data: []byte("a\nb\nc")}}, io.EOF},
		{"only one leading space stripped", "data:  two\n\n", []Event{{Data: []byte(" two")}}, io.EOF},
		{"anthropic named event", "event: message_start\ndata: {}\n\n",
			[]Event{{Event: "message_start", Data: []byte("{}")}}, io.EOF},
		{"id field", "id: 7\ndata: x\n\n", []Event{{ID: "7", Data: []byte("x")}}, io.EOF},
		{"comments skipped", ": keep-alive\n\n: hi\ndata: x\n\n", []Event{{Data: []byte("x")}}, io.EOF},
		{"leading blank lines", "\n\n\ndata: x\n\n", []Event{{Data: []byte("x")}}, io.EOF},
		{"empty data", "data:\n\n", []Event{{Data: []byte{}}}, io.EOF},
		{"unknown field ignored", "foo: bar\ndata: x\n\n", []Event{{Data: []byte("x")}}, io.EOF},
		{"cut after data line", "data: x\n\ndata: y\n", []Event{{Data: []byte("x")}}, io.ErrUnexpectedEOF},
		{"cut mid line", "data: x\n\ndata: {\"par", []Event{{Data: []byte("x")}}, io.ErrUnexpectedEOF},
		{"trailing comment is clean", "data: x\n\n: bye", []Event{{Data: []byte("x")}}, io.EOF},
		{"event without data", "event: ping\n\n", []Event{{Event: "ping"}}, io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// OneByteReader exercises every fragment boundary.
			for _, src := range []io.Reader{strings.NewReader(tt.in), iotest.OneByteReader(strings.NewReader(tt.in))} {
				got, err := readAll(t, NewReader(src))
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if len(got) != len(tt.want) {
					t.Fatalf("got %d events %+v, want %d", len(got), got, len(tt.want))
				}
				for i := range got {
					g, w := got[i], tt.want[i]
					if g.Event != w.Event || g.ID != w.ID || !bytes.Equal(g.Data, w.Data) || (g.Data == nil) != (w.Data == nil) {
						t.Errorf("event %d = %+v (data %q), want %+v (data %q)", i, g, g.Data, w, w.Data)
					}
				}
			}
		})
	}
}

func TestReaderStickyError(t *testing.T) {
	r := NewReader(strings.NewReader("data: x\n"))
	for i := 0; i < 3; i++ {
		if _, err := r.Next(); err != io.ErrUnexpectedEOF {
			t.Fatalf("call %d: err = %v", i, err)
		}
	}
}

func TestReaderLineLimit(t *testing.T) {
	long := "data: " + strings.Repeat("x", 100) + "\n\n"
	if _, err := NewReaderSize(strings.NewReader(long), 50).Next(); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("err = %v, want ErrLineTooLong", err)
	}
	ev, err := NewReaderSize(strings.NewReader(long), 200).Next()
	if err != nil || len(ev.Data) != 100 {
		t.Fatalf("ev = %v err = %v", ev, err)
	}
	// Lines longer than the internal buffer but within the default limit.
	big := strings.Repeat("y", 200<<10)
	ev, err = NewReader(strings.NewReader("data: " + big + "\r\n\r\n")).Next()
	if err != nil || string(ev.Data) != big {
		t.Fatalf("big line: err = %v len = %d", err, len(ev.Data))
	}
	if _, err := NewReader(strings.NewReader("data: " + strings.Repeat("z", DefaultMaxLine+1) + "\n\n")).Next(); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("over default limit: err = %v", err)
	}
}

func TestReaderDataOwned(t *testing.T) {
	r := NewReader(strings.NewReader("data: first\n\ndata: second\n\n"))
	a, _ := r.Next()
	b, _ := r.Next()
	if string(a.Data) != "first" || string(b.Data) != "second" {
		t.Fatalf("data aliased: %q %q", a.Data, b.Data)
	}
}

func TestWrite(t *testing.T) {
	tests := []struct {
		ev   Event
		want string
	}{
		{Event{Data: []byte(`{"a":1}`)}, "data: {\"a\":1}\n\n"},
		{Event{Event: "message_stop", Data: []byte(`{}`)}, "event: message_stop\ndata: {}\n\n"},
		{Event{Data: []byte("a\nb")}, "data: a\ndata: b\n\n"},
		{Event{ID: "3", Data: []byte("x")}, "id: 3\ndata: x\n\n"},
		{Event{}, "data: \n\n"},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		if err := Write(&b, &tt.ev); err != nil {
			t.Fatal(err)
		}
		if b.String() != tt.want {
			t.Errorf("Write(%+v) = %q, want %q", tt.ev, b.String(), tt.want)
		}
		ev, err := NewReader(&b).Next()
		if err != nil || ev.Event != tt.ev.Event || string(ev.Data) != string(tt.ev.Data) {
			t.Errorf("round trip of %+v: %+v %v", tt.ev, ev, err)
		}
	}
}

func TestDone(t *testing.T) {
	if !(&Event{Data: []byte("[DONE]")}).Done() || (&Event{Data: []byte("x")}).Done() {
		t.Fatal("Done misreports")
	}
}
