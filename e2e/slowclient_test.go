//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"sluice/gwerror"
	"sluice/gwerror/gwerrortest"
	"sluice/llmapi"
	"sluice/mockllm"
)

// Slow and stalled clients are bounded (issue 9 items 3 and 11): a client
// that stops reading a stream is cut after server.writeTimeout (the upstream
// request is cancelled, the reservation resolved with the forwarded output);
// a body that trickles in is answered 408 after server.readTimeout; the API
// key is checked before the body is read; thousands of slow unauthenticated
// connections are closed once their deadline passes.
//
// These tests use raw sockets where a well-behaved client library would not
// misbehave as needed (stop reading, trickle), and Linux's /proc and socket
// options, hence the build tag.

// breakOffReport is what breakOffProbe saw of one request.
type breakOffReport struct {
	// brokenOff: a write or flush of the response failed, i.e. the gateway
	// closed the upstream connection before the mock had written everything.
	brokenOff bool
	written   int64
}

// breakOffProbe is the mock LLM behind a recorder that reports, once the
// mock's handler has returned, whether its writes to the gateway failed.
type breakOffProbe struct {
	mock    http.Handler
	reports chan breakOffReport
}

func newBreakOffProbe(t *testing.T) (*breakOffProbe, string) {
	p := &breakOffProbe{mock: mockllm.New(mockllm.Options{}), reports: make(chan breakOffReport, 16)}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

func (p *breakOffProbe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	pw := &breakOffWriter{ResponseWriter: w}
	p.mock.ServeHTTP(pw, r)
	p.reports <- breakOffReport{brokenOff: pw.failed.Load(), written: pw.written.Load()}
}

// breakOffWriter records the failure of any write or flush.
type breakOffWriter struct {
	http.ResponseWriter
	failed  atomic.Bool
	written atomic.Int64
}

func (w *breakOffWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.written.Add(int64(n))
	if err != nil {
		w.failed.Store(true)
	}
	return n, err
}

func (w *breakOffWriter) FlushError() error {
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if err != nil {
		w.failed.Store(true)
	}
	return err
}

// dialSmallWindow dials addr with a 4 KiB receive buffer, so that a client
// that stops reading stalls the sender after a few kilobytes in flight.
func dialSmallWindow(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// untilClosed reads conn to its end and reports whether the peer closed it
// (EOF or reset) within d.
func closedByPeer(conn net.Conn, d time.Duration) bool {
	_ = conn.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestStalledReaderIsCut: a client that stops reading a long stream holds
// neither the stream, the upstream connection nor its reservation: after
// server.writeTimeout the gateway cuts it (outcome cancelled), breaks the
// upstream request off, and charges the output it had forwarded. On main the
// gateway waited on the write for ever and the reservation never resolved.
func TestStalledReaderIsCut(t *testing.T) {
	c := newCalc(t)
	lim := window(10_000_000, time.Hour)
	probe, probeURL := newBreakOffProbe(t)
	doc := strings.Replace(streamChargeDoc([]string{"stalled"}, authTokenRoute("w", "probe", lim.Max), "  writeTimeout: 1s\n"),
		"providers:\n", "providers:\n  - {name: probe, type: openai, url: \""+probeURL+"\"}\n", 1)
	env := startLimitsEnv(t, doc, nil)

	req := chatReq{Model: streamChargeModel, Text: "Never stop talking.", MaxTokens: 200_000, Stream: true}
	P := c.estimate(llmapi.ChatCompletions, req.body())
	before := env.resolutions("w")
	conn := dialSmallWindow(t, strings.TrimPrefix(env.Base, "http://"))
	hreq, _ := http.NewRequest(http.MethodPost, env.Base+"/w/v1/chat/completions", bytes.NewReader(req.body()))
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Authorization", "Bearer "+appKey("stalled"))
	if err := hreq.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 1024), hreq)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("response: %v %v", resp, err)
	}
	if err := untilFirstEvent(resp.Body); err != nil {
		t.Fatal(err)
	}
	// The client stops reading here.
	env.waitSettled()
	select {
	case rep := <-probe.reports:
		if !rep.brokenOff {
			t.Fatalf("the upstream wrote its whole stream (%d bytes): it was not cancelled", rep.written)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the upstream request is still running 20s after the client was cut")
	}
	got := env.used(counterKey("w:stalled", policyTokens, "total", lim), lim)
	if got <= P || got >= P+req.MaxTokens {
		t.Fatalf("charged %d, want prompt %d + the output forwarded before the cut (more than 0, less than %d)", got, P, req.MaxTokens)
	}
	if d := env.resolutions("w")["abandoned"] - before["abandoned"]; d != 1 {
		t.Fatalf("abandoned +%v, want +1", d)
	}
	if !closedByPeer(conn, 20*time.Second) {
		t.Fatal("the gateway did not close the stalled client's connection")
	}
	t.Logf("stalled reader cut after writeTimeout: charged %d (prompt %d + %d forwarded)", got, P, got-P)
}

// slowRequest writes the head of a POST to path with a body of length bytes
// (chunked when length < 0) and the extra header lines, then body.
func trickledRequest(path string, length int, extra, body string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n%s", path, extra)
	if length < 0 {
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		fmt.Fprintf(&b, "%x\r\n%s", 1<<20, body) // a 1 MiB chunk that never completes
	} else {
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", length, body)
	}
	return b.String()
}

// TestSlowBodyTimesOut: a body that trickles in is answered 408
// request_timeout once server.readTimeout has passed, and the connection is
// closed; nothing is charged or sent upstream. On main nothing bounded it.
func TestSlowBodyTimesOut(t *testing.T) {
	lim := window(1_000_000, time.Hour)
	env := startLimitsEnv(t, streamChargeDoc([]string{"slow"}, authTokenRoute("b", "mock", lim.Max), "  readTimeout: 1s\n"), nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(env.Base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, trickledRequest("/b/v1/chat/completions", 1000, "Authorization: Bearer "+appKey("slow")+"\r\n", `{"model":`)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() { // one byte every 100ms, for ever
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer within 20s to a body trickling in (readTimeout 1s): %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || gwerrortest.MustOpenAI(t, body).Code != gwerror.CodeRequestTimeout || !resp.Close {
		t.Fatalf("status %d, Connection %q: %s; want 408 request_timeout and the connection closed", resp.StatusCode, resp.Header.Get("Connection"), body)
	}
	if !closedByPeer(conn, 20*time.Second) {
		t.Fatal("the connection stayed open after the 408")
	}
	if got := env.used(counterKey("b:slow", policyTokens, "total", lim), lim); got != 0 {
		t.Fatalf("charged %d for a request whose body never arrived", got)
	}
}

// TestKeyCheckedBeforeBody: a request with a missing or unknown key is
// answered 401 as soon as its headers are in, while its (huge, slow) body is
// still being sent: the gateway does not read it, and closes the connection.
// On main the body was read first, for as long as the client took.
func TestKeyCheckedBeforeBody(t *testing.T) {
	env := startLimitsEnv(t, streamChargeDoc([]string{"good"}, authTokenRoute("k", "mock", 1_000_000), ""), nil)
	for _, tc := range []struct {
		name, key string
	}{{"no key", ""}, {"unknown key", "sk-e2e-nobody"}} {
		t.Run(tc.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			sent := make(chan int64, 1)
			go func() { // 64 KiB of a declared 8 MiB (under maxRequestBytes), then nothing
				n, _ := pw.Write(bytes.Repeat([]byte(" "), 64<<10))
				sent <- int64(n)
			}()
			req, _ := http.NewRequest(http.MethodPost, env.Base+"/k/v1/chat/completions", pr)
			req.ContentLength = 8 << 20
			req.Header.Set("Content-Type", "application/json")
			if tc.key != "" {
				req.Header.Set("Authorization", "Bearer "+tc.key)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) }) // the body ends when the client gives up
			resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req.WithContext(ctx))
			if err != nil {
				t.Fatalf("no 401 while the body was still coming: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || gwerrortest.MustOpenAI(t, body).Code != gwerror.CodeInvalidAPIKey {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if !resp.Close {
				t.Fatal("the 401 before the body does not close the connection")
			}
			pw.CloseWithError(errors.New("test done"))
			if n := <-sent; n > 64<<10 {
				t.Fatalf("sent %d bytes", n)
			}
		})
	}
	// A valid key is served as usual.
	resp, body := env.mustSend("/k/v1/chat/completions", "good", chatReq{Model: streamChargeModel, Text: "hi"}.body(), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("valid key: %d %s", resp.StatusCode, body)
	}
}

// TestSlowUnauthenticatedConnections: 5,000 connections without a key, a
// third trickling their headers and the rest trickling a body (by length or
// chunked), are all closed by the gateway shortly after the 1s deadlines
// (header ones without an answer, body ones after a 401 sent at once), and
// the process gets its file descriptors back. On main the header ones were
// held 30s and the body ones for as long as they trickled.
func TestSlowUnauthenticatedConnections(t *testing.T) {
	const conns = 5000
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur < 2*conns+1000 {
		t.Skipf("needs %d file descriptors (limit %d, %v)", 2*conns+1000, rl.Cur, err)
	}
	env := startLimitsEnv(t, streamChargeDoc([]string{"app-a"}, authTokenRoute("u", "mock", 1_000_000),
		"  readHeaderTimeout: 1s\n  readTimeout: 1s\n"), nil)
	host, port := loopbackAddr4(t, strings.TrimPrefix(env.Base, "http://"))
	baseline := countOpenFDs(t)

	path := "/u/v1/chat/completions"
	kinds := []struct {
		name     string
		head     string
		answered bool // a 401 is expected before the close
	}{
		{"headers trickling", "POST " + path + " HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\nX-Pad: ", false},
		{"body by length trickling", trickledRequest(path, 1<<20, "", `{"model":`), true},
		{"chunked body trickling", trickledRequest(path, -1, "", `{"model":`), true},
	}
	cs := make([]*rawSocket, conns)
	dials := make(chan int)
	errs := make(chan error, conns)
	for range 32 {
		go func() {
			for i := range dials {
				rc, err := dialRawSocket(host, port)
				if err == nil {
					rc.kind = i % len(kinds)
					err = rc.send(kinds[rc.kind].head)
				}
				cs[i] = rc
				errs <- err
			}
		}()
	}
	for i := range conns {
		dials <- i
	}
	close(dials)
	for range conns {
		if err := <-errs; err != nil {
			t.Fatalf("dial: %v", err)
		}
	}
	defer func() {
		for _, rc := range cs {
			rc.close()
		}
	}()
	opened := time.Now()
	t.Logf("%d connections open, %d fds in the process", conns, countOpenFDs(t))

	// Sweep: read what arrived, trickle one byte into every open connection
	// every few sweeps, until the gateway closed them all.
	deadline := opened.Add(20 * time.Second)
	buf := make([]byte, 4096)
	for sweep := 0; ; sweep++ {
		open := 0
		for _, rc := range cs {
			if rc.closed {
				continue
			}
			if rc.poll(buf) {
				rc.close()
				continue
			}
			open++
			if sweep%3 == 0 {
				rc.send("x")
			}
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			byKind := map[string]int{}
			for _, rc := range cs {
				if !rc.closed {
					byKind[kinds[rc.kind].name]++
				}
			}
			t.Fatalf("%d of %d slow connections still open 20s after they were opened (deadlines 1s): %v", open, conns, byKind)
		}
		time.Sleep(100 * time.Millisecond)
	}
	closedIn := time.Since(opened)
	for _, rc := range cs {
		want := "HTTP/1.1 401 "
		if !kinds[rc.kind].answered {
			want = ""
		}
		if got := string(rc.got); !strings.HasPrefix(got, want) || (want == "" && got != "") {
			t.Fatalf("%s: the gateway answered %q, want %q", kinds[rc.kind].name, got, want)
		}
	}
	// The client side is closed; the gateway's side must follow.
	var fds int
	for {
		if fds = countOpenFDs(t); fds <= baseline+64 {
			break
		}
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatalf("%d fds open after every client closed, %d before the test", fds, baseline)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("all %d slow connections closed by the gateway within %v of opening; fds %d (baseline %d)", conns, closedIn.Round(100*time.Millisecond), fds, baseline)
}

// rawSocket is a non-blocking client socket driven by one sweeping goroutine:
// thousands of them need no goroutine each (the race detector caps a
// process at 8128 goroutines).
type rawSocket struct {
	fd     int
	kind   int
	got    []byte
	closed bool
}

func dialRawSocket(host [4]byte, port int) (*rawSocket, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := syscall.Connect(fd, &syscall.SockaddrInet4{Port: port, Addr: host}); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return &rawSocket{fd: fd}, nil
}

// send writes s, ignoring a full buffer or a closed peer (poll notices).
func (c *rawSocket) send(s string) error {
	err := syscall.Sendto(c.fd, []byte(s), syscall.MSG_NOSIGNAL, nil)
	if err == syscall.EAGAIN || err == syscall.EPIPE || err == syscall.ECONNRESET {
		return nil
	}
	return err
}

// poll reads what arrived and reports whether the peer closed the connection
// (EOF or reset).
func (c *rawSocket) poll(buf []byte) bool {
	for {
		n, err := syscall.Read(c.fd, buf)
		switch {
		case n > 0:
			c.got = append(c.got, buf[:n]...)
		case err == syscall.EAGAIN || err == syscall.EINTR:
			return false
		default: // 0 bytes: EOF; or a reset or another error
			return true
		}
	}
}

func (c *rawSocket) close() {
	if c != nil && !c.closed {
		c.closed = true
		syscall.Close(c.fd)
	}
}

func loopbackAddr4(t *testing.T, addr string) ([4]byte, int) {
	t.Helper()
	ta, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	var h [4]byte
	copy(h[:], ta.IP.To4())
	return h, ta.Port
}

// openFDs counts the process's open file descriptors.
func countOpenFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count file descriptors: %v", err)
	}
	return len(ents)
}
