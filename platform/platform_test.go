package platform_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"sluice/platform"
	"sluice/policies/builtin"
)

func open(t *testing.T, dir, envToken string, announce *bytes.Buffer) (*platform.Platform, *httptest.Server) {
	t.Helper()
	p, err := platform.Open(context.Background(), platform.Options{DataDir: dir, AdminToken: envToken, Announce: announce, Registry: builtin.Registry()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(func() { srv.Close(); p.Close() })
	return p, srv
}

func status(t *testing.T, srv *httptest.Server, token string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+"/api/v1/providers", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Without SLUICE_ADMIN_TOKEN the first start generates a token, prints it
// once and stores only its hash; later starts print nothing and accept it.
func TestGeneratedAdminTokenShownOnce(t *testing.T) {
	dir := t.TempDir()
	var first bytes.Buffer
	p, srv := open(t, dir, "", &first)
	token := regexp.MustCompile(`sluice-admin-[0-9a-f]{40}`).FindString(first.String())
	if token == "" {
		t.Fatalf("no token announced: %q", first.String())
	}
	if status(t, srv, token) != 200 || status(t, srv, token+"x") != 401 {
		t.Fatal("the generated token does not authenticate (or a wrong one does)")
	}
	srv.Close()
	p.Close()

	var second bytes.Buffer
	_, srv2 := open(t, dir, "", &second)
	if second.Len() != 0 {
		t.Fatalf("a second start announced again: %q", second.String())
	}
	if status(t, srv2, token) != 200 {
		t.Fatal("the token no longer works after a restart")
	}
	eachFile(t, dir, func(path string, fi os.FileInfo, b []byte) {
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is mode %v: the data directory's files must be owner-only", path, fi.Mode().Perm())
		}
		if bytes.Contains(b, []byte(token)) {
			t.Errorf("%s holds the admin token in clear", path)
		}
	})
}

// eachFile calls fn with every regular file under dir and its contents.
func eachFile(t *testing.T, dir string, fn func(path string, fi os.FileInfo, b []byte)) {
	t.Helper()
	err := filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		// A file gone between the listing and the read (SQLite removes its
		// -shm and -wal files as the last connection closes) holds nothing.
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || fi.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		fn(path, fi, b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// SLUICE_ADMIN_TOKEN replaces the previous environment token.
func TestEnvAdminTokenReplaced(t *testing.T) {
	dir := t.TempDir()
	p, srv := open(t, dir, "first-token-aaaaaaaa", &bytes.Buffer{})
	if status(t, srv, "first-token-aaaaaaaa") != 200 {
		t.Fatal("env token refused")
	}
	srv.Close()
	p.Close()
	_, srv2 := open(t, dir, "second-token-bbbbbbbb", &bytes.Buffer{})
	if status(t, srv2, "second-token-bbbbbbbb") != 200 || status(t, srv2, "first-token-aaaaaaaa") != 401 {
		t.Fatal("the replaced env token still works, or the new one does not")
	}
}
