package api_test

// The platform API over HTTP: a real platform (SQLite in a temporary data
// directory) behind an httptest server, driven as an operator's client
// would, including the malformed, stale and unauthenticated requests.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/pgtest"
	"sluice/platform"
	"sluice/platform/api"
)

const adminToken = "test-admin-token-0123456789"

type client struct {
	t     *testing.T
	url   string
	token string
	dir   string
	p     *platform.Platform
}

func newPlatform(t *testing.T) *client {
	t.Helper()
	return newPlatformOn(t, "")
}

// newPlatformOn is newPlatform on the database at databaseURL (PostgreSQL;
// "": SQLite in the data directory).
func newPlatformOn(t *testing.T, databaseURL string) *client {
	t.Helper()
	return newPlatformWith(t, platform.Options{DatabaseURL: databaseURL})
}

// engines runs fn once on a platform over SQLite and once over
// PostgreSQL (a private cluster or PG_URL's server).
func engines(t *testing.T, fn func(t *testing.T, c *client)) {
	t.Helper()
	pg := pgtest.Start(t)
	t.Run("sqlite", func(t *testing.T) { fn(t, newPlatformOn(t, "")) })
	t.Run("postgres", func(t *testing.T) { fn(t, newPlatformOn(t, pg.NewDatabase(t))) })
}

// do sends body (JSON-encoded unless it is a string or nil) with headers
// given as name, value pairs.
func (c *client) do(method, path string, body any, hdr ...string) (int, http.Header, []byte) {
	c.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			c.t.Fatal(err)
		}
		r = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, c.url+path, r)
	if err != nil {
		c.t.Fatal(err)
	}
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// must is do that fails unless the status is want, and decodes into out.
func (c *client) must(want int, method, path string, body, out any, hdr ...string) http.Header {
	c.t.Helper()
	status, h, b := c.do(method, path, body, hdr...)
	if status != want {
		c.t.Fatalf("%s %s: %d %s, want %d", method, path, status, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return h
}

type errBody struct {
	Error struct {
		Code    string        `json:"code"`
		Message string        `json:"message"`
		Details []api.Problem `json:"details"`
	} `json:"error"`
}

func (c *client) fail(want int, method, path string, body any, hdr ...string) errBody {
	c.t.Helper()
	var e errBody
	c.must(want, method, path, body, &e, hdr...)
	return e
}

func paths(e errBody) []string {
	var out []string
	for _, d := range e.Error.Details {
		out = append(out, d.Path)
	}
	return out
}

func (c *client) provider(name string) api.Provider {
	c.t.Helper()
	var p api.Provider
	c.must(201, "POST", "/providers", map[string]any{"name": name, "type": "openai", "url": "http://127.0.0.1:9", "apiKey": "sk-upstream-" + name + "-SECRET"}, &p)
	return p
}

func (c *client) version() int64 {
	c.t.Helper()
	var l api.GatewayList
	c.must(200, "GET", "/gateways", nil, &l)
	return l.CurrentVersion
}

func (c *client) auditCount() int {
	c.t.Helper()
	var page api.AuditPage
	c.must(200, "GET", "/audit?limit=500", nil, &page)
	return len(page.Entries)
}

// snapshot is everything a refused request must leave unchanged.
func (c *client) snapshot(providerID string) string {
	c.t.Helper()
	_, h, rl := c.do("GET", "/providers/"+providerID+"/rate-limits", nil)
	_, gh, gs := c.do("GET", "/providers/"+providerID+"/guardrails", nil)
	_, _, p := c.do("GET", "/providers/"+providerID, nil)
	return fmt.Sprintf("v%d audit%d %s %s %s %s %s", c.version(), c.auditCount(), h.Get("ETag"), rl, gh.Get("ETag"), gs, p)
}

func TestEveryOperationNeedsItsToken(t *testing.T) {
	c := newPlatform(t)
	spec, err := api.Spec()
	if err != nil {
		t.Fatal(err)
	}
	for path, item := range spec.Paths.Map() {
		for method := range item.Operations() {
			p := strings.NewReplacer("{providerId}", "x", "{applicationId}", "x", "{guardrailId}", "x", "{keyId}", "x", "{gatewayId}", "x").Replace(path)
			for _, tok := range []string{"", "wrong-token"} {
				c.token = tok
				status, _, b := c.do(method, p, "{}")
				if path == "/openapi.json" {
					if status != 200 {
						t.Errorf("%s %s without a token: %d, want 200 (the document is public)", method, path, status)
					}
					continue
				}
				if status != 401 || !strings.Contains(string(b), `"unauthorized"`) {
					t.Errorf("%s %s with token %q: %d %s, want 401", method, path, tok, status, b)
				}
			}
		}
	}
	c.token = ""
	if status, _, _ := c.do("GET", "/no/such/path", nil); status != 401 {
		t.Errorf("an unknown path without a token: %d, want 401 before 404", status)
	}
	c.token = adminToken
	if status, _, _ := c.do("GET", "/no/such/path", nil); status != 404 {
		t.Errorf("an unknown path: %d, want 404", status)
	}
	// A gateway token is not an admin token, and the reverse.
	var gw api.CreatedGateway
	c.must(201, "POST", "/gateways", map[string]any{"name": "edge"}, &gw)
	c.token = gw.Token
	c.fail(401, "GET", "/providers", nil)
	c.must(200, "GET", "/gateway/deployment?after=0&wait=0", nil, nil)
	c.token = adminToken
	c.fail(401, "GET", "/gateway/deployment?after=0&wait=0", nil)
}

func TestRateLimitValidationPathsAndNothingWritten(t *testing.T) {
	c := newPlatform(t)
	p := c.provider("openai")
	valid := map[string]any{"backend": map[string]any{"global": map[string]any{
		"token": map[string]any{"enabled": true, "count": 1000, "reset": map[string]any{"duration": 1, "unit": "hour"}}}}}
	h := c.must(200, "PUT", "/providers/"+p.Id+"/rate-limits", valid, nil, "If-Match", `"0"`)
	etag := h.Get("ETag")
	before := c.snapshot(p.Id)

	count := func(n any, unit string) map[string]any {
		return map[string]any{"enabled": true, "count": n, "reset": map[string]any{"duration": 1, "unit": unit}}
	}
	tests := []struct {
		name  string
		body  any
		paths []string
	}{
		{"negative count and unknown unit", map[string]any{"backend": map[string]any{"global": map[string]any{
			"token": count(-5, "fortnight"), "request": count(0, "hour")}}},
			[]string{"$.backend.global.request.count", "$.backend.global.token.count", "$.backend.global.token.reset.unit"}},
		{"both global and perResource", map[string]any{"consumer": map[string]any{
			"global": map[string]any{"token": count(5, "hour")}, "perResource": map[string]any{"default": map[string]any{"token": count(5, "hour")}}}},
			[]string{"$.consumer"}},
		{"negative cost, month of 3, unknown resource", map[string]any{"consumer": map[string]any{"perResource": map[string]any{
			"resources": []any{map[string]any{"resource": "/v1/nope", "limit": map[string]any{
				"cost": map[string]any{"enabled": true, "amount": -1, "reset": map[string]any{"duration": 3, "unit": "month"}}}}}}}},
			[]string{"$.consumer.perResource.resources[0].limit.cost.amount", "$.consumer.perResource.resources[0].resource"}},
		{"month of 3 alone", map[string]any{"consumer": map[string]any{"global": map[string]any{
			"cost": map[string]any{"enabled": true, "amount": 1, "reset": map[string]any{"duration": 3, "unit": "month"}}}}},
			[]string{"$.consumer.global.cost.reset.duration"}},
		{"alert thresholds not ascending", map[string]any{"backend": map[string]any{"global": map[string]any{
			"token": map[string]any{"enabled": true, "count": 5, "reset": map[string]any{"duration": 1, "unit": "hour"}, "alertAt": []int{80, 80, 50}}}}},
			[]string{"$.backend.global.token.alertAt[1]", "$.backend.global.token.alertAt[2]"}},
		{"unknown field", map[string]any{"backend": map[string]any{"global": map[string]any{"tokens": count(5, "hour")}}},
			[]string{"$.backend.global"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := c.fail(422, "PUT", "/providers/"+p.Id+"/rate-limits", tt.body, "If-Match", etag)
			if e.Error.Code != "validation_failed" || strings.Join(paths(e), " ") != strings.Join(tt.paths, " ") {
				t.Fatalf("paths %v, want %v (%s)", paths(e), tt.paths, e.Error.Message)
			}
			if after := c.snapshot(p.Id); after != before {
				t.Fatalf("a refused request changed the store:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
	e := c.fail(400, "PUT", "/providers/"+p.Id+"/rate-limits", `{"backend":`, "If-Match", etag)
	if e.Error.Code != "bad_request" {
		t.Fatalf("truncated JSON: %+v", e)
	}
	if after := c.snapshot(p.Id); after != before {
		t.Fatal("a refused request changed the store")
	}
}

// Two operators read the same settings, both edit: the first write wins,
// the second gets 412 and changes nothing; without If-Match, 428.
func TestRateLimitsOptimisticConcurrency(t *testing.T) {
	c := newPlatform(t)
	p := c.provider("openai")
	h := c.must(200, "GET", "/providers/"+p.Id+"/rate-limits", nil, nil)
	stale := h.Get("ETag")
	lim := func(n int) map[string]any {
		return map[string]any{"consumer": map[string]any{"global": map[string]any{
			"request": map[string]any{"enabled": true, "count": n, "reset": map[string]any{"duration": 1, "unit": "minute"}}}}}
	}
	h = c.must(200, "PUT", "/providers/"+p.Id+"/rate-limits", lim(10), nil, "If-Match", stale)
	winner := h.Get("ETag")
	if winner == stale {
		t.Fatal("the ETag did not change")
	}
	e := c.fail(412, "PUT", "/providers/"+p.Id+"/rate-limits", lim(20), "If-Match", stale)
	if e.Error.Code != "precondition_failed" {
		t.Fatalf("%+v", e)
	}
	c.fail(428, "PUT", "/providers/"+p.Id+"/rate-limits", lim(30))
	var got api.RateLimits
	h = c.must(200, "GET", "/providers/"+p.Id+"/rate-limits", nil, &got)
	if got.Consumer.Global.Request.Count != 10 || h.Get("ETag") != winner {
		t.Fatalf("settings %+v etag %s: the loser overwrote the winner", got.Consumer.Global.Request, h.Get("ETag"))
	}
	// Concurrently: of n writers with one ETag, exactly one wins.
	const n = 8
	res := make(chan int, n)
	for i := range n {
		go func() {
			status, _, _ := c.do("PUT", "/providers/"+p.Id+"/rate-limits", lim(100+i), "If-Match", winner)
			res <- status
		}()
	}
	won := 0
	for range n {
		switch s := <-res; s {
		case 200:
			won++
		case 412:
		default:
			t.Errorf("status %d", s)
		}
	}
	if won != 1 {
		t.Fatalf("%d writers won with the same ETag, want 1", won)
	}
}

func TestGuardrailValidation(t *testing.T) {
	c := newPlatform(t)
	p := c.provider("openai")
	var ok api.Guardrail
	h := c.must(201, "POST", "/providers/"+p.Id+"/guardrails", map[string]any{"name": "model-access", "params": map[string]any{"allow": []any{"gpt-4o*"}}}, &ok)
	before := c.snapshot(p.Id)
	tests := []struct {
		name  string
		body  any
		paths []string
		msg   string
	}{
		{"unknown policy", map[string]any{"name": "no-such-policy"}, []string{"$.name"}, "unknown policy"},
		{"unknown version", map[string]any{"name": "model-access", "version": "v9", "params": map[string]any{"allow": []any{"x"}}}, []string{"$.version"}, "no version"},
		{"bad params", map[string]any{"name": "token-based-ratelimit", "params": map[string]any{
			"consumerBased": "yes", "totalTokenLimits": []any{map[string]any{"count": -1, "duration": "1h"}}}},
			[]string{"$.params.consumerBased", "$.params.totalTokenLimits[0].count"}, ""},
		{"unknown param", map[string]any{"name": "model-access", "params": map[string]any{"allow": []any{"x"}, "alow": true}}, []string{"$.params.alow"}, "unknown parameter"},
		{"cost limit after the operator's llm-cost", nil, nil, ""},
		{"bad version pattern", map[string]any{"name": "model-access", "version": "1"}, []string{"$.version"}, ""},
	}
	for _, tt := range tests {
		if tt.body == nil {
			continue
		}
		t.Run(tt.name, func(t *testing.T) {
			e := c.fail(422, "POST", "/providers/"+p.Id+"/guardrails", tt.body)
			if strings.Join(paths(e), " ") != strings.Join(tt.paths, " ") || !strings.Contains(e.Error.Message, tt.msg) {
				t.Fatalf("paths %v (%s), want %v with %q", paths(e), e.Error.Message, tt.paths, tt.msg)
			}
			if after := c.snapshot(p.Id); after != before {
				t.Fatalf("a refused guardrail was written:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
	// Updating with bad params is refused too, and keeps the old version.
	e := c.fail(422, "PUT", "/providers/"+p.Id+"/guardrails/"+ok.Id, map[string]any{"name": "model-access", "params": map[string]any{"allow": "gpt"}}, "If-Match", h.Get("ETag"))
	if strings.Join(paths(e), " ") != "$.params.allow" {
		t.Fatalf("update paths %v", paths(e))
	}
	if after := c.snapshot(p.Id); after != before {
		t.Fatal("a refused update was written")
	}
	// An llm-cost guardrail before a cost-limit guardrail: the chain check
	// names the order.
	c.must(201, "POST", "/providers/"+p.Id+"/guardrails", map[string]any{"name": "llm-cost"}, nil)
	e = c.fail(422, "POST", "/providers/"+p.Id+"/guardrails", map[string]any{"name": "llm-cost-based-ratelimit", "params": map[string]any{
		"consumerBased": true, "budgetLimits": []any{map[string]any{"amount": 0.1, "duration": "1h"}}}})
	if !strings.Contains(e.Error.Message, "list llm-cost after llm-cost-based-ratelimit") {
		t.Fatalf("order problem: %s", e.Error.Message)
	}
	// At position 1, before the llm-cost guardrail, it is accepted.
	var g api.Guardrail
	c.must(201, "POST", "/providers/"+p.Id+"/guardrails", map[string]any{"name": "llm-cost-based-ratelimit", "position": 1, "params": map[string]any{
		"consumerBased": true, "budgetLimits": []any{map[string]any{"amount": 0.1, "duration": "1h"}}}}, &g)
	var list api.GuardrailList
	c.must(200, "GET", "/providers/"+p.Id+"/guardrails", nil, &list)
	var names []string
	for _, x := range list.Guardrails {
		names = append(names, fmt.Sprintf("%d:%s", x.Position, x.Name))
	}
	if strings.Join(names, " ") != "0:model-access 1:llm-cost-based-ratelimit 2:llm-cost" {
		t.Fatalf("order %v", names)
	}
	var dep api.ProviderDeployment
	c.must(200, "GET", "/providers/"+p.Id+"/deployment", nil, &dep)
	var chain []string
	for _, e := range dep.Entries {
		chain = append(chain, e.Name)
	}
	if strings.Join(chain, " ") != "api-key-auth model-access llm-cost-based-ratelimit llm-cost" {
		t.Fatalf("chain %v (an operator's llm-cost replaces the generated one)", chain)
	}
}

// The upstream key is write-only: never in a response, an audit entry, a
// log line or the database file in clear.
func TestUpstreamKeyNeverReadable(t *testing.T) {
	c := newPlatform(t)
	const secret = "sk-upstream-openai-SECRET"
	p := c.provider("openai")
	if !p.HasApiKey {
		t.Fatal("hasApiKey false")
	}
	var app api.Application
	c.must(201, "POST", "/applications", map[string]any{"name": "A", "providers": []string{p.Id}}, &app)
	c.must(200, "PUT", "/providers/"+p.Id, map[string]any{"name": "openai", "type": "openai", "url": "http://127.0.0.1:9"}, nil)
	var got api.Provider
	c.must(200, "GET", "/providers/"+p.Id, nil, &got)
	if !got.HasApiKey {
		t.Fatal("an update without apiKey dropped the key")
	}
	var responses []string
	for _, path := range []string{"/providers", "/providers/" + p.Id, "/providers/" + p.Id + "/deployment", "/audit", "/applications"} {
		_, _, b := c.do("GET", path, nil)
		responses = append(responses, string(b))
	}
	for i, r := range responses {
		if strings.Contains(r, "SECRET") {
			t.Errorf("response %d holds the upstream key: %s", i, r)
		}
	}
	if !strings.Contains(responses[2], `[redacted]`) {
		t.Errorf("the deployment view does not show the key as redacted: %s", responses[2])
	}
	// The gateway's copy has it (it must call the upstream).
	var gw api.CreatedGateway
	c.must(201, "POST", "/gateways", map[string]any{"name": "edge"}, &gw)
	c.token = gw.Token
	var doc api.GatewayDeployment
	c.must(200, "GET", "/gateway/deployment?after=0", nil, &doc)
	if !strings.Contains(doc.Document, "Bearer "+secret) {
		t.Fatalf("the gateway's deployment lacks the upstream key:\n%s", doc.Document)
	}
	c.token = adminToken
	grepDataDir(t, c.dir, secret)
}

// grepDataDir fails if any file under dir (the SQLite file, its WAL, the
// key file) holds needle.
func grepDataDir(t *testing.T, dir, needle string) {
	t.Helper()
	n := 0
	err := filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		if bytes.Contains(b, []byte(needle)) {
			t.Errorf("%s holds the secret in clear", path)
		}
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("walking %s: %v (%d files)", dir, err, n)
	}
}

func TestKeysLifecycleAndAudit(t *testing.T) {
	c := newPlatform(t)
	p := c.provider("openai")
	var app api.Application
	c.must(201, "POST", "/applications", map[string]any{"name": "A", "providers": []string{p.Id}}, &app)
	c.fail(422, "POST", "/applications", map[string]any{"name": "B", "providers": []string{p.Id, "prv-missing"}})
	var k api.CreatedKey
	c.must(201, "POST", "/applications/"+app.Id+"/keys", nil, &k)
	if !strings.HasPrefix(k.Key, api.KeyPrefix) || !strings.HasPrefix(k.Key, k.Prefix) || len(k.Key) < 40 {
		t.Fatalf("key %+v", k)
	}
	c.fail(422, "POST", "/applications/"+app.Id+"/keys", map[string]any{"expiresAt": time.Now().Add(-time.Hour).Format(time.RFC3339)})
	var k2 api.CreatedKey
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	c.must(201, "POST", "/applications/"+app.Id+"/keys", map[string]any{"expiresAt": exp.Format(time.RFC3339)}, &k2)
	var list api.KeyList
	c.must(200, "GET", "/applications/"+app.Id+"/keys", nil, &list)
	if len(list.Keys) != 2 || list.Keys[1].ExpiresAt == nil || !list.Keys[1].ExpiresAt.Equal(exp) {
		t.Fatalf("keys %+v", list.Keys)
	}
	_, _, raw := c.do("GET", "/applications/"+app.Id+"/keys", nil)
	if strings.Contains(string(raw), k.Key) {
		t.Fatal("the key list shows a key")
	}
	c.must(204, "DELETE", "/applications/"+app.Id+"/keys/"+k.Id, nil, nil)
	c.must(204, "DELETE", "/applications/"+app.Id+"/keys/"+k.Id, nil, nil) // idempotent
	c.fail(404, "DELETE", "/applications/"+app.Id+"/keys/key-nope", nil)
	var gw api.CreatedGateway
	c.must(201, "POST", "/gateways", map[string]any{"name": "edge"}, &gw)
	gc := &client{t: t, url: c.url, token: gw.Token}
	var doc api.GatewayDeployment
	gc.must(200, "GET", "/gateway/deployment?after=0", nil, &doc)
	if strings.Contains(doc.Document, k.Id) || !strings.Contains(doc.Document, k2.Id) || strings.Contains(doc.Document, k2.Key) {
		t.Fatalf("the gateways' deployment must list the live key only, by hash:\n%s", doc.Document)
	}
	var page api.AuditPage
	c.must(200, "GET", "/audit", nil, &page)
	var actions []string
	for _, e := range page.Entries {
		if e.TokenId != "env" {
			t.Errorf("audit entry %d by %q, want the env token's id", e.Id, e.TokenId)
		}
		actions = append(actions, e.Action)
	}
	want := "gateway.create key.revoke key.create key.create application.create provider.create"
	if strings.Join(actions, " ") != want {
		t.Fatalf("audit %v, want %s", actions, want)
	}
	rev := page.Entries[1]
	if rev.Before == nil || rev.After == nil || (*rev.After)["revokedAt"] == nil || (*rev.Before)["revokedAt"] != nil {
		t.Fatalf("revocation before/after: %+v %+v", rev.Before, rev.After)
	}
	b, _ := json.Marshal(page)
	if strings.Contains(string(b), k.Key) || strings.Contains(string(b), "SECRET") {
		t.Fatal("the audit log holds a secret")
	}
	// Paging.
	var first, second api.AuditPage
	c.must(200, "GET", "/audit?limit=2", nil, &first)
	if len(first.Entries) != 2 || first.Next == nil {
		t.Fatalf("first page %+v", first)
	}
	c.must(200, "GET", fmt.Sprintf("/audit?limit=10&before=%d", *first.Next), nil, &second)
	if len(second.Entries) != 4 || second.Next != nil || second.Entries[0].Id >= first.Entries[1].Id {
		t.Fatalf("second page %+v", second)
	}
	c.fail(422, "GET", "/audit?limit=0", nil)
}

// Gateways: a revoked token is refused; check-ins show applied, pending
// and failed; the long poll answers as soon as a change is committed.
func TestGatewayDeliveryAndStates(t *testing.T) {
	c := newPlatform(t)
	var gw api.CreatedGateway
	c.must(201, "POST", "/gateways", map[string]any{"name": "edge-1"}, &gw)
	state := func() api.Gateway {
		var g api.Gateway
		c.must(200, "GET", "/gateways/"+gw.Id, nil, &g)
		return g
	}
	if s := state().State; s != api.GatewayStateUnknown {
		t.Fatalf("state %s before any report", s)
	}
	gc := &client{t: t, url: c.url, token: gw.Token}
	var doc api.GatewayDeployment
	gc.must(200, "GET", "/gateway/deployment?after=0", nil, &doc)
	gc.must(204, "POST", "/gateway/status", map[string]any{"version": doc.Version, "result": "applied"}, nil)
	if s := state(); s.State != api.GatewayStateApplied || s.AppliedVersion != doc.Version {
		t.Fatalf("after applying: %+v", s)
	}
	// Nothing newer: 204 after the wait.
	if status, _, _ := gc.do("GET", fmt.Sprintf("/gateway/deployment?after=%d&wait=0", doc.Version), nil); status != 204 {
		t.Fatalf("poll without a change: %d", status)
	}
	// A waiting poll answers when a change lands.
	got := make(chan api.GatewayDeployment, 1)
	go func() {
		var d api.GatewayDeployment
		gc.must(200, "GET", fmt.Sprintf("/gateway/deployment?after=%d&wait=30", doc.Version), nil, &d)
		got <- d
	}()
	time.Sleep(50 * time.Millisecond) // let the poll start waiting (either order passes)
	start := time.Now()
	p := c.provider("openai")
	var next api.GatewayDeployment
	select {
	case next = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll did not answer after a change")
	}
	if next.Version <= doc.Version || !strings.Contains(next.Document, `"name":"openai"`) {
		t.Fatalf("new deployment v%d:\n%s", next.Version, next.Document)
	}
	t.Logf("change to poll answer: %v", time.Since(start))
	if s := state().State; s != api.GatewayStatePending {
		t.Fatalf("state %s while serving an older version", s)
	}
	gc.must(204, "POST", "/gateway/status", map[string]any{"version": next.Version, "result": "failed", "error": "boom"}, nil)
	if s := state(); s.State != api.GatewayStateFailed || s.LastError == nil || *s.LastError != "boom" || s.AppliedVersion != doc.Version {
		t.Fatalf("after a failure: %+v", s)
	}
	gc.fail(422, "POST", "/gateway/status", map[string]any{"version": 1, "result": "maybe"})
	// Keys last used.
	var app api.Application
	c.must(201, "POST", "/applications", map[string]any{"name": "A", "providers": []string{p.Id}}, &app)
	var k api.CreatedKey
	c.must(201, "POST", "/applications/"+app.Id+"/keys", nil, &k)
	used := time.Now().UTC().Truncate(time.Second)
	gc.must(204, "POST", "/gateway/status", map[string]any{"version": next.Version, "result": "applied",
		"keysLastUsed": map[string]any{k.Id: used.Format(time.RFC3339), "key-unknown": used.Format(time.RFC3339)}}, nil)
	var keys api.KeyList
	c.must(200, "GET", "/applications/"+app.Id+"/keys", nil, &keys)
	if keys.Keys[0].LastUsedAt == nil || !keys.Keys[0].LastUsedAt.Equal(used) {
		t.Fatalf("last used %v, want %v", keys.Keys[0].LastUsedAt, used)
	}
	// Revoked: every gateway call is refused.
	c.must(204, "DELETE", "/gateways/"+gw.Id, nil, nil)
	gc.fail(401, "GET", "/gateway/deployment?after=0", nil)
	gc.fail(401, "POST", "/gateway/status", map[string]any{"version": 1, "result": "applied"})
	if s := state().State; s != api.GatewayStateRevoked {
		t.Fatalf("state %s", s)
	}
}

func TestPoliciesCatalogAndOpenAPI(t *testing.T) {
	c := newPlatform(t)
	var pl api.PolicyList
	c.must(200, "GET", "/policies", nil, &pl)
	found := false
	for _, p := range pl.Policies {
		if p.Name == "token-based-ratelimit" && p.ParamsSchema["properties"] != nil {
			found = true
		}
	}
	if !found {
		t.Fatalf("catalog %+v", pl)
	}
	c.token = ""
	var doc map[string]any
	c.must(200, "GET", "/openapi.json", nil, &doc)
	if doc["openapi"] != "3.0.3" {
		t.Fatalf("openapi.json: %v", doc["openapi"])
	}
}

func TestProviderValidation(t *testing.T) {
	c := newPlatform(t)
	c.provider("openai")
	before := c.version()
	tests := []struct {
		body  map[string]any
		paths string
	}{
		{map[string]any{"name": "bad name", "type": "openai", "url": "http://x"}, "$.name"},
		{map[string]any{"name": "p2", "type": "bedrock", "url": "http://x"}, "$.type"},
		{map[string]any{"name": "p2", "type": "openai"}, "$.url"},
		{map[string]any{"name": "p2", "type": "openai", "url": "ftp://x"}, "$.url"},
		{map[string]any{"name": "p2", "type": "openai", "url": "http://a", "targets": []string{"http://b"}}, "$.targets"},
		{map[string]any{"name": "p2", "type": "openai", "url": "http://user:pw@a"}, "$.url"},
		{map[string]any{"name": "p2", "type": "openai", "url": "http://a", "authHeader": "bad header"}, "$.authHeader"},
		{map[string]any{"name": "p2", "type": "openai", "url": "http://a", "apiKey": "two\nlines"}, "$.apiKey"},
		{map[string]any{"name": "p2", "type": "openai", "url": "http://a", "applicationHeader": "x-mock-*"}, "$.applicationHeader"},
		{map[string]any{"name": "p2", "type": "openai", "url": "http://a", "applicationHeader": "Authorization"}, "$.applicationHeader"},
		{map[string]any{"name": "p2", "type": "openai", "url": "http://a", "forwardHeaders": []string{"x-mock-*", "cookie"}}, "$.forwardHeaders[1]"},
		{map[string]any{"name": "p2", "type": "openai", "url": "http://a", "usageReportUrl": "/mock/usage"}, "$.usageReportUrl"},
	}
	for _, tt := range tests {
		e := c.fail(422, "POST", "/providers", tt.body)
		if strings.Join(paths(e), " ") != tt.paths {
			t.Errorf("%v: paths %v (%s), want %s", tt.body, paths(e), e.Error.Message, tt.paths)
		}
	}
	e := c.fail(409, "POST", "/providers", map[string]any{"name": "openai", "type": "openai", "url": "http://a"})
	if e.Error.Code != "conflict" {
		t.Fatalf("%+v", e)
	}
	if c.version() != before {
		t.Fatal("a refused provider bumped the version")
	}
	var list api.ProviderList
	c.must(200, "GET", "/providers", nil, &list)
	if len(list.Providers) != 1 {
		t.Fatalf("%d providers", len(list.Providers))
	}
}

// The provider's usage fields are stored, returned, and reach the
// generated deployment.
func TestProviderUsageFields(t *testing.T) {
	c := newPlatform(t)
	in := map[string]any{"name": "p", "type": "openai", "url": "http://127.0.0.1:9", "forwardHeaders": []string{"x-mock-*"},
		"applicationHeader": "X-Mock-Tenant", "usageReportUrl": "http://127.0.0.1:9/mock/usage"}
	var p api.Provider
	c.must(201, "POST", "/providers", in, &p)
	if p.ApplicationHeader == nil || *p.ApplicationHeader != "X-Mock-Tenant" || p.UsageReportUrl == nil ||
		*p.UsageReportUrl != "http://127.0.0.1:9/mock/usage" || p.ForwardHeaders == nil || strings.Join(*p.ForwardHeaders, ",") != "x-mock-*" {
		t.Fatalf("created %+v", p)
	}
	var got api.Provider
	c.must(200, "GET", "/providers/"+p.Id, nil, &got)
	if got.ApplicationHeader == nil || *got.ApplicationHeader != *p.ApplicationHeader || got.UsageReportUrl == nil ||
		*got.UsageReportUrl != *p.UsageReportUrl || got.ForwardHeaders == nil || strings.Join(*got.ForwardHeaders, ",") != "x-mock-*" {
		t.Fatalf("read back %+v", got)
	}
	var dep api.ProviderDeployment
	c.must(200, "GET", "/providers/"+p.Id+"/deployment", nil, &dep)
	if !strings.Contains(dep.Yaml, "applicationHeader: X-Mock-Tenant") || !strings.Contains(dep.Yaml, "x-mock-*") {
		t.Fatalf("deployment:\n%s", dep.Yaml)
	}
	// An update without them removes them.
	got = api.Provider{}
	c.must(200, "PUT", "/providers/"+p.Id, map[string]any{"name": "p", "type": "openai", "url": "http://127.0.0.1:9"}, &got)
	if got.ApplicationHeader != nil || got.UsageReportUrl != nil || got.ForwardHeaders != nil {
		t.Fatalf("after update %+v", got)
	}
}

// A gateway revoked while its long poll waits gets 401 at once, not at the
// end of the wait.
func TestRevocationEndsAWaitingPoll(t *testing.T) {
	c := newPlatform(t)
	var gw, other api.CreatedGateway
	c.must(201, "POST", "/gateways", map[string]any{"name": "edge-1"}, &gw)
	c.must(201, "POST", "/gateways", map[string]any{"name": "edge-2"}, &other)
	v := c.version()
	type result struct {
		status int
		took   time.Duration
	}
	poll := func(token string) chan result {
		ch := make(chan result, 1)
		go func() {
			start := time.Now()
			g := &client{t: t, url: c.url, token: token}
			status, _, _ := g.do("GET", fmt.Sprintf("/gateway/deployment?after=%d&wait=20", v), nil)
			ch <- result{status, time.Since(start)}
		}()
		return ch
	}
	revoked, kept := poll(gw.Token), poll(other.Token)
	time.Sleep(100 * time.Millisecond)
	c.must(204, "DELETE", "/gateways/"+gw.Id, nil, nil)
	r := <-revoked
	if r.status != 401 || r.took > 10*time.Second {
		t.Fatalf("revoked gateway's poll: %d after %v", r.status, r.took)
	}
	// The other gateway keeps waiting and gets the next version.
	c.provider("openai")
	if r := <-kept; r.status != 200 {
		t.Fatalf("the other gateway's poll: %d", r.status)
	}
}
