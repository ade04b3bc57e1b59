package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestBenchUsage: sluice bench names its one benchmark, needs --out and
// refuses a mode it does not know (a run itself takes minutes: docs/fairness.md).
func TestBenchUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"bench"}, 2, "sluice bench fairness"},
		{[]string{"bench", "latency"}, 2, "sluice bench fairness"},
		{[]string{"bench", "fairness", "--mode", "fair"}, 2, "--out DIR is required"},
		{[]string{"bench", "fairness", "--mode", "lottery", "--out", t.TempDir()}, 1, `unknown mode "lottery"`},
		{[]string{"bench", "fairness", "--help"}, 0, "--tenants"},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, &out, &errb)
		if code != tc.code || !strings.Contains(out.String()+errb.String(), tc.want) {
			t.Errorf("%v: exit %d (want %d), output %q (want %q)", tc.args, code, tc.code, out.String()+errb.String(), tc.want)
		}
	}
}
