package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// target counts requests, checks what loadgen sends, and fails every
// failEvery-th request with a 500 (0: never).
type target struct {
	n         atomic.Int64
	bad       atomic.Int64
	failEvery int64
}

func (s *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := s.n.Add(1)
	body, _ := io.ReadAll(r.Body)
	if r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer k" ||
		r.Header.Get("Content-Type") != "application/json" || string(body) != defaultBody || r.Host != "example.test" {
		s.bad.Add(1)
	}
	if s.failEvery > 0 && n%s.failEvery == 0 {
		http.Error(w, "no", http.StatusInternalServerError)
		return
	}
	_, _ = w.Write([]byte(`{"ok":true}`))
}

func resultLine(t *testing.T, out string) map[string]string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "RESULT "); ok {
			m := map[string]string{}
			for _, f := range strings.Fields(rest) {
				k, v, _ := strings.Cut(f, "=")
				m[k] = v
			}
			return m
		}
	}
	t.Fatalf("no RESULT line in:\n%s", out)
	return nil
}

func TestRunModes(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		failEvery int64
		check     func(t *testing.T, res map[string]string, served int64)
	}{
		{
			name: "open loop sends exactly rate x duration measured requests",
			args: []string{"-mode", "open", "-rate", "200", "-duration", "250ms", "-warmup", "100ms"},
			check: func(t *testing.T, res map[string]string, served int64) {
				if res["requests"] != "50" || res["errors"] != "0" {
					t.Fatalf("requests=%s errors=%s, want 50 and 0", res["requests"], res["errors"])
				}
				// 20 warm-up requests are sent but not measured.
				if served != 70 {
					t.Fatalf("server saw %d requests, want 70", served)
				}
			},
		},
		{
			name:      "open loop counts non-2xx answers as errors",
			args:      []string{"-mode", "open", "-rate", "200", "-duration", "200ms", "-warmup", "0s"},
			failEvery: 4,
			check: func(t *testing.T, res map[string]string, served int64) {
				if res["requests"] != "30" || res["errors"] != "10" {
					t.Fatalf("requests=%s errors=%s, want 30 and 10", res["requests"], res["errors"])
				}
			},
		},
		{
			name: "closed loop measures every answered request",
			args: []string{"-mode", "closed", "-c", "4", "-duration", "200ms", "-warmup", "50ms"},
			check: func(t *testing.T, res map[string]string, served int64) {
				if res["requests"] == "0" || res["errors"] != "0" || res["mode"] != "closed" {
					t.Fatalf("result %v", res)
				}
				if res["p50_us"] == "0" && res["max_us"] == "0" {
					t.Fatalf("no latency recorded: %v", res)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &target{failEvery: tc.failEvery}
			srv := httptest.NewServer(s)
			defer srv.Close()
			var out, errOut bytes.Buffer
			args := append([]string{"-url", srv.URL + "/v1/chat/completions", "-H", "Authorization: Bearer k",
				"-H", "Host: example.test", "-label", "t"}, tc.args...)
			rc := run(args, &out, &errOut)
			if rc != 0 {
				t.Fatalf("exit %d: %s%s", rc, out.String(), errOut.String())
			}
			if s.bad.Load() != 0 {
				t.Fatalf("%d requests lacked the method, headers, host or body", s.bad.Load())
			}
			res := resultLine(t, out.String())
			if res["label"] != "t" {
				t.Fatalf("label = %q", res["label"])
			}
			tc.check(t, res, s.n.Load())
		})
	}
}

func TestPairedOpenLoopSplitsEvenly(t *testing.T) {
	a, b := &target{}, &target{failEvery: 2}
	sa, sb := httptest.NewServer(a), httptest.NewServer(b)
	defer sa.Close()
	defer sb.Close()
	var out, errOut bytes.Buffer
	rc := run([]string{"-url", sa.URL, "-label", "a", "-url2", sb.URL, "-label2", "b",
		"-H", "Authorization: Bearer k", "-H", "Host: example.test",
		"-mode", "open", "-rate", "100", "-duration", "300ms", "-warmup", "0s"}, &out, &errOut)
	if rc != 0 {
		t.Fatalf("exit %d: %s%s", rc, out.String(), errOut.String())
	}
	var results []map[string]string
	for _, block := range strings.Split(out.String(), "\n\n") {
		results = append(results, resultLine(t, block))
	}
	if len(results) != 2 || results[0]["label"] != "a" || results[1]["label"] != "b" {
		t.Fatalf("results %v", results)
	}
	// Each URL gets 100 req/s for 300ms; b fails every other request.
	if a.n.Load() != 30 || b.n.Load() != 30 {
		t.Fatalf("served a=%d b=%d, want 30 each", a.n.Load(), b.n.Load())
	}
	if results[0]["requests"] != "30" || results[0]["errors"] != "0" ||
		results[1]["requests"] != "15" || results[1]["errors"] != "15" {
		t.Fatalf("results %v", results)
	}
}

func TestRunRejectsBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-url", "http://127.0.0.1:1", "-mode", "sideways"},
		{"-url", "http://127.0.0.1:1", "-H", "no colon"},
		{"-url", "http://127.0.0.1:1", "-mode", "open", "-rate", "0"},
		{"-url", "http://127.0.0.1:1", "-c", "0"},
		{"-url", "http://127.0.0.1:1", "-url2", "http://127.0.0.1:2"},
	} {
		var out, errOut bytes.Buffer
		if rc := run(args, &out, &errOut); rc != 2 {
			t.Errorf("run(%q) = %d, want 2", args, rc)
		}
	}
}

func TestUnreachableTargetFails(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	var out, errOut bytes.Buffer
	rc := run([]string{"-url", url, "-mode", "open", "-rate", "50", "-duration", "100ms", "-warmup", "0s"}, &out, &errOut)
	if rc != 1 {
		t.Fatalf("exit %d, want 1; output:\n%s", rc, out.String())
	}
	res := resultLine(t, out.String())
	if res["requests"] != "0" || res["errors"] != "5" {
		t.Fatalf("result %v, want 0 requests and 5 errors", res)
	}
	if !strings.Contains(out.String(), "connection refused: 5") {
		t.Fatalf("errors not classified:\n%s", out.String())
	}
}
