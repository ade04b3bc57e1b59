// Package redistest starts throwaway redis-server processes for tests: a
// single server (restartable on the same port, for outage tests) and small
// clusters. It fails the test, never skips it, when redis-server is missing:
// the Redis store's tests are part of the suite, not optional extras.
//
// Every server listens on loopback only, with persistence off, in a temporary
// directory, and is stopped when the test ends.
package redistest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a server may take to answer PING. Generous: a
// loaded CI machine can be slow to fork and exec.
const startTimeout = 15 * time.Second

// URL returns REDIS_URL when it is set, else starts a server for the test and
// returns its redis:// URL. Tests sharing an external server must isolate
// themselves with KeyPrefix.
func URL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return StartServer(t).URL()
}

// KeyPrefix returns a random key prefix, so that tests sharing one server
// never see each other's keys.
func KeyPrefix(t testing.TB) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("redistest: random prefix: %v", err)
	}
	return "t" + hex.EncodeToString(b[:]) + ":"
}

// Flush removes every key of the server at url (FLUSHALL). Prefer KeyPrefix
// when the server may be shared.
func Flush(t testing.TB, url string) {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatalf("redistest: FLUSHALL: %v", err)
	}
}

// Server is one redis-server process on a fixed loopback port. Stop and Start
// may be called any number of times; the port stays the same, so clients
// reconnect by themselves. Methods are safe for concurrent use.
type Server struct {
	t    testing.TB
	port int
	dir  string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// StartServer starts a standalone server and registers its cleanup.
func StartServer(t testing.TB) *Server {
	t.Helper()
	s := newServer(t, freePort(t, false), nil)
	s.Start()
	return s
}

func newServer(t testing.TB, port int, extra []string) *Server {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server not found on PATH (install redis-server or set REDIS_URL): %v", err)
	}
	dir := t.TempDir()
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--loglevel", "warning",
		"--logfile", filepath.Join(dir, "redis.log"),
	}
	args = append(args, extra...)
	s := &Server{t: t, port: port, dir: dir, args: append([]string{path}, args...)}
	t.Cleanup(s.Stop)
	return s
}

// Addr is host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL is the redis:// URL of database 0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Start starts the process (no-op when running) and waits until it answers
// PING. It fails the test when the server does not come up.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.Dir = s.dir
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redistest: starting redis-server: %v", err)
	}
	s.cmd = cmd
	if err := waitPing(s.Addr(), startTimeout); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
		s.t.Fatalf("redistest: redis-server on %s did not answer: %v\n%s", s.Addr(), err, log)
	}
}

// Stop kills the process and waits for it to exit (no-op when stopped).
// Connections are cut at once, as in a crash.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// StartCluster starts a Redis Cluster of masters (>= 3) master nodes without
// replicas, waits for cluster_state:ok on every node, and returns their
// addresses.
func StartCluster(t testing.TB, masters int) []string {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, got %d", masters)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redistest: redis-cli not found on PATH: %v", err)
	}
	addrs := make([]string, masters)
	for i := range addrs {
		s := newServer(t, freePort(t, true), []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
		})
		s.Start()
		addrs[i] = s.Addr()
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(startTimeout)
	for _, a := range addrs {
		for {
			info, err := clusterInfo(a)
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster node %s not ok: %v\n%s", a, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return addrs
}

func clusterInfo(addr string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.ClusterInfo(ctx).Result()
}

// freePort asks the kernel for a free loopback port. With bus set, the
// cluster bus port (port+10000) must be free as well.
func freePort(t testing.TB, bus bool) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("redistest: free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !bus {
			return port
		}
		if port+10000 > 65535 {
			continue
		}
		lb, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		_ = lb.Close()
		return port
	}
	t.Fatalf("redistest: no free port pair for a cluster node")
	return 0
}

// waitPing polls addr with a raw PING until it answers +PONG.
func waitPing(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if last = ping(addr); last == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("no PONG within %v: %w", timeout, last)
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected reply %q", strings.TrimSpace(line))
	}
	return nil
}
