package gateway

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"sluice/policies"
)

// TestBrokenStreamReachesClient: a stream that cannot be delivered in full
// (cut by the upstream, or ended by a panicking stream policy) must reach the
// client as a broken body, as it would from the provider, never as a cleanly
// terminated one that an SDK takes for a complete answer. A complete stream
// ends cleanly. The request is still counted in the metrics.
func TestBrokenStreamReachesClient(t *testing.T) {
	srv := startUpstream(t, &fakeLLM{})
	cases := []struct {
		name    string
		chain   []map[string]any
		header  map[string]string
		wantErr error
		want    policies.OutcomeKind
	}{
		{name: "complete", want: policies.Completed},
		{name: "cut by the upstream", header: map[string]string{"x-mock-drop-after": "2"},
			wantErr: io.ErrUnexpectedEOF, want: policies.UpstreamFailed},
		{name: "stream policy panicked", chain: []map[string]any{{"panic": "stream"}},
			wantErr: io.ErrUnexpectedEOF, want: policies.Failed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var extra map[string]any
			if len(tc.chain) > 0 {
				extra = tc.chain[0]
			}
			env := startGateway(t, recDeployment([]string{srv.URL}, 0, rec("a", extra)))
			req, _ := http.NewRequest(http.MethodPost, env.base+"/openai/v1/chat/completions", strings.NewReader(streamBody))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Request-Id", "req-cut")
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if tc.wantErr == nil {
				if err != nil || !strings.HasSuffix(strings.TrimSpace(string(body)), "data: [DONE]") {
					t.Fatalf("complete stream: err %v, body:\n%s", err, body)
				}
			} else if !errors.Is(err, tc.wantErr) {
				t.Fatalf("read error %v, want %v; the client got a cleanly ended body:\n%s", err, tc.wantErr, body)
			}
			if f := env.log.waitFinals(t, "req-cut", 1); f[0].Kind != tc.want {
				t.Fatalf("outcome %v, want %v", f[0].Kind, tc.want)
			}
			m, err := http.Get(env.base + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			text, _ := io.ReadAll(m.Body)
			m.Body.Close()
			if !strings.Contains(string(text), `sluice_requests_total{endpoint="chat.completions",route="r1",status="200"} 1`) {
				t.Fatalf("request not counted:\n%s", text)
			}
			if !strings.Contains(string(text), "sluice_inflight_requests 0") {
				t.Fatalf("in-flight gauge not back to 0")
			}
		})
	}
}
