package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/proctest"
)

// TestGatewayAccessLog: sluice gateway writes one access line per request
// on stderr in the process's log format, with the usage record's fields.
func TestGatewayAccessLog(t *testing.T) {
	bin := sluiceBinary(t)
	mock := proctest.StartMock(t, bin)
	path := filepath.Join(t.TempDir(), "deployment.yaml")
	writeAtomically(t, path, deploymentDoc(mock.URL, []string{"gpt-4o-mini"}, ""))
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			gw := proctest.StartGateway(t, bin, "gateway-"+format, "--config", path, "--log-format", format)
			if status, body := chat(t, gw.URL, testKey, "gpt-4o-mini"); status != 200 {
				t.Fatalf("chat: %d %s", status, body)
			}
			if format == "text" {
				line := gw.WaitLog(t, 5*time.Second, " level=INFO msg=access id=", " route=cmdtest ", " application=app-cmd ",
					" requested_model=gpt-4o-mini ", " resolution=settled ", " status=200 ", " attempts=1")
				if !strings.HasPrefix(line, "time=") {
					t.Errorf("access line %q does not start with its time", line)
				}
				return
			}
			line := gw.WaitLog(t, 5*time.Second, `"msg":"access"`)
			var got map[string]any
			if err := json.Unmarshal([]byte(line), &got); err != nil {
				t.Fatalf("access line %q: %v", line, err)
			}
			for k, want := range map[string]any{"level": "INFO", "route": "cmdtest", "provider": "mock", "application": "app-cmd",
				"requested_model": "gpt-4o-mini", "resolution": "settled", "status": 200.0, "attempts": 1.0} {
				if got[k] != want {
					t.Errorf("access line %s = %v, want %v (%s)", k, got[k], want, line)
				}
			}
			if _, err := time.Parse(time.RFC3339Nano, got["time"].(string)); err != nil {
				t.Errorf("access line time: %v", err)
			}
		})
	}
}
