package gateway

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRefusedBodyIsDrained: a request refused before its body is read
// (here: for its Content-Type) is answered while its client may still be
// writing the body; the gateway reads and discards the rest (up to net/http's
// 256 KiB, for at most lingerRead) before it closes the connection, so the
// client's writes succeed and it reads the answer. Closing with the body
// unread would reset the connection under the client's writes (a Go client
// then reports "write: broken pipe" instead of the answer).
func TestRefusedBodyIsDrained(t *testing.T) {
	env := startGateway(t, recDeployment([]string{"http://127.0.0.1:1"}, 0))
	const size, chunk = 64 << 10, 1 << 10
	conn, err := net.Dial("tcp", strings.TrimPrefix(env.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /openai/v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n", size)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType || !resp.Close {
		t.Fatalf("%d, close %v; want 415 and close", resp.StatusCode, resp.Close)
	}
	// The rest of the body, after the answer, a little at a time: a reset
	// would show within these writes.
	part := []byte(strings.Repeat("x", chunk))
	for sent := 0; sent < size; sent += chunk {
		if _, err := conn.Write(part); err != nil {
			t.Fatalf("writing the body after the answer, at %d of %d bytes: %v", sent, size, err)
		}
		time.Sleep(time.Millisecond)
	}
}
