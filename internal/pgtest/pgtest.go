// Package pgtest gives tests PostgreSQL databases of their own. With PG_URL
// (or DATABASE_URL) set it creates databases on that server; otherwise it
// starts a private cluster with the Debian binaries (initdb, postgres) on a
// free loopback port in a temporary directory, as the postgres user when the
// test runs as root. A missing PostgreSQL fails the test, never skips it: the
// platform store's PostgreSQL suite is part of the test suite.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// startTimeout bounds initdb plus server start; generous for a loaded machine.
const startTimeout = 60 * time.Second

// Server is a PostgreSQL server tests may create databases on.
type Server struct {
	// AdminURL connects to a maintenance database as a role that may create
	// and drop databases.
	AdminURL string
}

// URL returns the URL of a new, empty database that is dropped when t ends.
func URL(t testing.TB) string {
	t.Helper()
	return Start(t).NewDatabase(t)
}

// Start returns the server named by PG_URL or DATABASE_URL, or starts a
// private cluster that is stopped and deleted when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	for _, name := range []string{"PG_URL", "DATABASE_URL"} {
		if u := os.Getenv(name); u != "" {
			return &Server{AdminURL: u}
		}
	}
	return startCluster(t)
}

// NewDatabase creates a database with a random name and returns its URL; it
// is dropped (connections and all) when t ends.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	name := "sluice_t_" + hex.EncodeToString(b[:])
	admin, err := sql.Open("pgx", s.AdminURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		t.Fatalf("pgtest: CREATE DATABASE on %s: %v", redact(s.AdminURL), err)
	}
	t.Cleanup(func() {
		defer admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := url.Parse(s.AdminURL)
	if err != nil {
		t.Fatalf("pgtest: bad URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// binDir finds the PostgreSQL server binaries: PG_BIN, else the newest
// /usr/lib/postgresql/<major>/bin, else PATH.
func binDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("PG_BIN"); d != "" {
		return d
	}
	majors, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(majors, func(i, j int) bool { return majorOf(majors[i]) > majorOf(majors[j]) })
	if len(majors) > 0 {
		return filepath.Dir(majors[0])
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	t.Fatalf("pgtest: no PostgreSQL server binaries (initdb) found: install postgresql, set PG_BIN, or set PG_URL to a server")
	return ""
}

func majorOf(initdb string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return n
}

// startCluster runs initdb and postgres (not pg_ctl, so that the server is a
// child of the test and dies with it) and waits until it accepts connections.
func startCluster(t testing.TB) *Server {
	t.Helper()
	bin := binDir(t)
	cred, uid, gid := serverCredential(t)
	dir, err := os.MkdirTemp("", "sluice-pgtest-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatalf("pgtest: chown %s: %v", dir, err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	port := freePort(t)
	logPath := filepath.Join(dir, "postgres.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if cred != nil {
		_ = logFile.Chown(uid, gid)
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=200")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("pgtest: starting postgres: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// SIGQUIT is PostgreSQL's immediate shutdown; the data is thrown away.
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
	})
	s := &Server{AdminURL: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)}
	if err := waitReady(s.AdminURL, exited); err != nil {
		log, _ := os.ReadFile(logPath)
		t.Fatalf("pgtest: postgres on port %d did not come up: %v\n%s", port, err, log)
	}
	return s
}

// serverCredential is the identity to run the server as: the postgres user
// when the test runs as root (PostgreSQL refuses to run as root), else the
// test's own (nil credential).
func serverCredential(t testing.TB) (*syscall.Credential, int, int) {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil, 0, 0
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("pgtest: running as root needs a postgres user to run the server as: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, uid, gid
}

func waitReady(dsn string, exited <-chan struct{}) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("the server exited: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
