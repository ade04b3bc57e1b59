package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"sluice/internal/proctest"
	"sluice/mockllm"
)

// TestMockLLMCapacityFlags runs `sluice mock-llm --capacity ... --usage-header ...`
// and reads its engine and per-tenant usage back from GET /mock/usage.
func TestMockLLMCapacityFlags(t *testing.T) {
	bin := sluiceBinary(t)
	mock := proctest.Start(t, bin, proctest.Spec{Name: "mock-llm", ReadyPath: "/healthz",
		Args: []string{"mock-llm", "--listen", "127.0.0.1:0", "--capacity", "sequences=3,kv=5000,prefill=0,decode=0", "--usage-header", "X-Team"}})
	req, _ := http.NewRequest(http.MethodPost, mock.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o","max_tokens":7,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Team", "blue")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = http.Get(mock.URL + "/mock/usage")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var u mockllm.Usage
	if err := json.NewDecoder(resp.Body).Decode(&u); err != nil {
		t.Fatal(err)
	}
	if u.Engine == nil || u.Engine.Sequences != 3 || u.Engine.KVTokens != 5000 || u.Engine.Admitted != 1 {
		t.Fatalf("engine %+v", u.Engine)
	}
	if blue := u.Tenants["blue"]; blue.Completed != 1 || blue.CompletionTokens != 7 {
		t.Fatalf("tenants %+v", u.Tenants)
	}
}

func TestMockLLMBadCapacity(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := cmdMockLLM([]string{"--listen", "127.0.0.1:0", "--capacity", "sequences=0"}, &stdout, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "--capacity") || !strings.Contains(stderr.String(), "sequences must be a positive integer") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	stdout.Reset()
	if code := cmdMockLLM([]string{"--help"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "-capacity") ||
		!strings.Contains(stdout.String(), "-usage-header") {
		t.Fatalf("help: exit %d, %q", code, stdout.String())
	}
}
