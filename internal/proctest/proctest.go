// Package proctest runs the real sluice binary from tests: it builds the
// binary once per test process, starts `sluice gateway` and `sluice mock-llm`
// children on loopback ports, waits until they answer, captures their stderr
// and kills them when the test ends.
//
// A child must print "... listening on http://ADDR" on stdout once it listens;
// every sluice server command does.
package proctest

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// StartTimeout bounds how long a child may take to print its address and
// become ready. Generous: a loaded CI machine may be slow to exec.
const StartTimeout = 20 * time.Second

// buildTimeout bounds `go build` of the binary (a cold build cache on a busy
// machine takes minutes).
const buildTimeout = 5 * time.Minute

// Binary is the sluice binary of one test process, built on first use. A test
// package holds one in a variable, so that all its tests share one build, and
// calls Remove from TestMain after m.Run. The zero value is ready; it is safe
// for concurrent use.
type Binary struct {
	once sync.Once
	dir  string
	path string
	err  error
	out  []byte
}

// Path builds sluice/cmd/sluice on the first call and returns the binary's
// path; a failed build fails every caller's test.
func (b *Binary) Path(t testing.TB) string {
	t.Helper()
	b.once.Do(func() {
		b.dir, b.err = os.MkdirTemp("", "sluice-proctest-")
		if b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "sluice")
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		b.out, b.err = exec.CommandContext(ctx, "go", "build", "-o", b.path, "sluice/cmd/sluice").CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("go build ./cmd/sluice: %v\n%s", b.err, b.out)
	}
	return b.path
}

// Remove deletes the built binary, if any. Call it after every test using b
// has finished.
func (b *Binary) Remove() {
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// Spec says how to run one child.
type Spec struct {
	// Name names the child in failures and logs.
	Name string
	Args []string
	// Env is the child's environment; nil inherits the test's.
	Env []string
	// ReadyPath is polled (GET) until it answers 200.
	ReadyPath string
}

// Proc is a running child process.
type Proc struct {
	Name string
	// URL is http://ADDR as the child printed it.
	URL    string
	cmd    *exec.Cmd
	stdout *Buffer
	stderr *Buffer
	done   chan struct{} // closed when the process has exited
	err    error         // Wait's result, valid once done is closed
}

// Start runs bin as s says, waits for its listening address and for
// s.ReadyPath to answer 200. The child is killed at cleanup if it still runs;
// its stderr (head and tail) is logged when the test failed.
func Start(t testing.TB, bin string, s Spec) *Proc {
	t.Helper()
	cmd := exec.Command(bin, s.Args...)
	cmd.Env = s.Env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &Proc{Name: s.Name, cmd: cmd, stdout: &Buffer{}, stderr: &Buffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: start: %v", s.Name, err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.stdout.Write([]byte(sc.Text() + "\n"))
			if _, a, ok := strings.Cut(sc.Text(), " listening on "); ok {
				addr <- strings.TrimSpace(a)
				break
			}
		}
		_, _ = io.Copy(p.stdout, stdout)
		// Wait only after stdout is drained (os/exec's rule for StdoutPipe).
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			_ = cmd.Process.Kill()
		}
		<-p.done
		if t.Failed() {
			t.Logf("%s stderr:\n%s", s.Name, headTail(p.stderr.String(), 4096))
		}
	})
	select {
	case p.URL = <-addr:
	case <-p.done:
		t.Fatalf("%s exited before listening: %v\n%s", s.Name, p.err, p.stderr.String())
	case <-time.After(StartTimeout):
		t.Fatalf("%s printed no listening address within %v", s.Name, StartTimeout)
	}
	p.waitReady(t, s.ReadyPath)
	return p
}

// StartMock runs `sluice mock-llm` on a free loopback port.
func StartMock(t testing.TB, bin string) *Proc {
	t.Helper()
	return Start(t, bin, Spec{Name: "mock-llm", ReadyPath: "/healthz", Args: []string{"mock-llm", "--listen", "127.0.0.1:0"}})
}

// StartGateway runs `sluice gateway --listen 127.0.0.1:0 args...` and waits
// for /readyz.
func StartGateway(t testing.TB, bin, name string, args ...string) *Proc {
	t.Helper()
	return Start(t, bin, Spec{Name: name, ReadyPath: "/readyz", Args: append([]string{"gateway", "--listen", "127.0.0.1:0"}, args...)})
}

func (p *Proc) waitReady(t testing.TB, path string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(StartTimeout)
	for {
		resp, err := client.Get(p.URL + path)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("%s: %s not ready (last error %v)", p.Name, path, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the process's exit error (nil for exit status 0); valid once Exited.
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Stdout is everything the process has written to stdout so far (its
// first address line included).
func (p *Proc) Stdout() string { return p.stdout.String() }

// Stderr is everything the process has written to stderr so far.
func (p *Proc) Stderr() string { return p.stderr.String() }

// Signal sends sig to the process.
func (p *Proc) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: signal %v: %v", p.Name, sig, err)
	}
}

// WaitExit waits up to within for the process to exit and returns its exit
// code.
func (p *Proc) WaitExit(t testing.TB, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("%s did not exit within %v", p.Name, within)
	}
	return p.cmd.ProcessState.ExitCode()
}

// WaitLog polls the process's stderr until one line contains every one of
// parts, or fails after within; it returns that line.
func (p *Proc) WaitLog(t testing.TB, within time.Duration, parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for line := range strings.SplitSeq(p.stderr.String(), "\n") {
			if containsAll(line, parts) {
				return line
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no log line with %q within %v", p.Name, parts, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func containsAll(s string, parts []string) bool {
	for _, part := range parts {
		if !strings.Contains(s, part) {
			return false
		}
	}
	return true
}

// headTail shortens s to its first and last n bytes.
func headTail(s string, n int) string {
	if len(s) <= 2*n {
		return s
	}
	return s[:n] + "\n[...]\n" + s[len(s)-n:]
}

// Buffer is a bytes.Buffer safe for concurrent Write and String: a child's
// stderr, or the log of a server that may write from its own goroutines after
// the test function returned.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
