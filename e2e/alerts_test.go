package e2e

// Budget alerts and remaining budgets end to end: `sluice serve` with a
// consumer token limit that alerts at 80 and 100 %, traffic through the
// gateway past the limit, a webhook receiver that refuses the first
// delivery.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/internal/proctest"
	"sluice/internal/redistest"
)

// receiver is a webhook that answers 500 to its first delivery.
type receiver struct {
	t      *testing.T
	secret string
	mu     sync.Mutex
	posts  int
	// ok holds the bodies of the deliveries it accepted, by event id.
	ok  map[string][]alertBody
	bad []string
}

type alertBody struct {
	Type           string    `json:"type"`
	ID             string    `json:"id"`
	Threshold      int       `json:"threshold"`
	Trigger        string    `json:"trigger"`
	ApplicationID  string    `json:"applicationId"`
	Provider       string    `json:"provider"`
	Origin         string    `json:"origin"`
	Scope          string    `json:"scope"`
	Limit          string    `json:"limit"`
	Used           string    `json:"used"`
	WindowResetsAt time.Time `json:"windowResetsAt"`
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.posts++
	if rc.posts == 1 {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	if err := verifySignature(rc.secret, r.Header.Get("X-Sluice-Signature"), body); err != "" {
		rc.bad = append(rc.bad, err)
	}
	var b alertBody
	if err := json.Unmarshal(body, &b); err != nil || b.ID != r.Header.Get("X-Sluice-Event-Id") {
		rc.bad = append(rc.bad, "body "+string(body)+" for event "+r.Header.Get("X-Sluice-Event-Id"))
	}
	rc.ok[b.ID] = append(rc.ok[b.ID], b)
	w.WriteHeader(http.StatusNoContent)
}

// verifySignature checks "t=<unix>,v1=<hex HMAC-SHA256(secret, t.body)>"
// as a receiver would; "" when it holds.
func verifySignature(secret, header string, body []byte) string {
	var ts, sig string
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return "signature time " + ts
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	want := hex.EncodeToString(mac.Sum(nil))
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return "signature " + header + " does not verify"
	}
	return ""
}

func (rc *receiver) thresholds() map[int]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := map[int]int{}
	for _, bs := range rc.ok {
		for _, b := range bs {
			out[b.Threshold]++
		}
	}
	return out
}

// TestBudgetAlertsAndRemainingBudgets runs on `sluice serve` with memory
// counters (the platform reads the in-process gateway's store) and with
// --counters-redis (the platform opens its own store on the same keys).
func TestBudgetAlertsAndRemainingBudgets(t *testing.T) {
	bin := sluiceBin.Path(t)
	mock := proctest.StartMock(t, bin).URL
	t.Run("memory", func(t *testing.T) { budgetAlerts(t, bin, mock) })
	t.Run("redis", func(t *testing.T) {
		budgetAlerts(t, bin, mock, "--counters-redis", redistest.URL(t), "--counters-key-prefix", redistest.KeyPrefix(t))
	})
}

func budgetAlerts(t *testing.T, bin, mock string, serveArgs ...string) {
	rc := &receiver{t: t, secret: "whsec-e2e-0123456789", ok: map[string][]alertBody{}}
	hook := httptest.NewServer(rc)
	defer hook.Close()

	serve := proctest.Start(t, bin, proctest.Spec{Name: "serve", ReadyPath: "/healthz",
		Env:  withEnv("SLUICE_ADMIN_TOKEN="+e2eAdminToken, countersEnv+"="),
		Args: append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--data", t.TempDir()}, serveArgs...)})
	gw := gatewayLine(t, serve)
	a := newAdmin(t, serve.URL)

	var wh struct {
		URL       string `json:"url"`
		SecretSet bool   `json:"secretSet"`
	}
	a.must(200, "PUT", "/alerts/webhook", map[string]any{"url": hook.URL + "/hook", "secret": rc.secret}, &wh)
	if wh.URL != hook.URL+"/hook" || !wh.SecretSet {
		t.Fatalf("webhook: %+v", wh)
	}
	if _, _, b := a.do("GET", "/audit?limit=500", nil); strings.Contains(string(b), rc.secret) {
		t.Fatal("the audit log shows the webhook secret")
	}

	provider := a.create("/providers", map[string]any{"name": "openai", "type": "openai", "url": mock, "apiKey": e2eUpstreamKey}).ID
	// A calendar day: no refill between two reads, so the platform's and
	// the gateway's figures must be equal.
	a.setLimits(provider, map[string]any{"consumer": map[string]any{"global": map[string]any{"token": map[string]any{
		"enabled": true, "count": 1000, "reset": map[string]any{"duration": 1, "unit": "day"}, "alertAt": []int{80, 100}}}}})
	app := a.create("/applications", map[string]any{"name": "A", "providers": []string{provider}}).ID
	key := a.create("/applications/"+app+"/keys", nil).Key
	a.waitApplied("local")

	served := 0
	for chatOnce(t, gw, "openai", key) == 200 {
		if served++; served > 50 {
			t.Fatal("the token limit never stopped the application")
		}
	}
	for range 3 {
		if got := chatOnce(t, gw, "openai", key); got != 429 {
			t.Fatalf("after the limit: %d, want 429", got)
		}
	}
	t.Logf("%d requests served before 429", served)

	deadline := time.Now().Add(30 * time.Second)
	for th := rc.thresholds(); th[80] < 1 || th[100] < 1; th = rc.thresholds() {
		if time.Now().After(deadline) {
			t.Fatalf("the receiver got %v (posts %d); want 80 and 100\n%s", th, rc.posts, serve.Stderr())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// More traffic past the limit, and time for any duplicate to arrive.
	for range 3 {
		chatOnce(t, gw, "openai", key)
	}
	time.Sleep(3 * time.Second)
	rc.mu.Lock()
	if len(rc.bad) > 0 {
		t.Errorf("bad deliveries: %v", rc.bad)
	}
	for id, bs := range rc.ok {
		if len(bs) != 1 {
			t.Errorf("event %s delivered %d times", id, len(bs))
		}
		b := bs[0]
		if b.Type != "budget.alert" || b.ApplicationID != app || b.Provider != "openai" || b.Origin != "$.consumer.global.token" ||
			b.Scope != "consumer" || b.Limit != "1000" || b.WindowResetsAt.IsZero() {
			t.Errorf("event body %+v", b)
		}
	}
	posts := rc.posts
	rc.mu.Unlock()
	if th := rc.thresholds(); len(th) != 2 || th[80] != 1 || th[100] != 1 {
		t.Fatalf("thresholds delivered %v, want 80 and 100 once each", th)
	}
	if posts != 3 {
		t.Errorf("%d POSTs, want 3 (one refused, then each event once)", posts)
	}

	var page struct {
		Alerts []struct {
			ID        string `json:"id"`
			Threshold int    `json:"threshold"`
			Trigger   string `json:"trigger"`
			Delivery  struct {
				State    string `json:"state"`
				Attempts int    `json:"attempts"`
			} `json:"delivery"`
		} `json:"alerts"`
		NextCursor string `json:"nextCursor"`
	}
	a.must(200, "GET", "/alerts?application="+app, nil, &page)
	attempts := 0
	if len(page.Alerts) != 2 || page.NextCursor != "" {
		t.Fatalf("alerts: %+v", page)
	}
	for _, al := range page.Alerts {
		if al.Delivery.State != "delivered" {
			t.Errorf("alert %+v not delivered", al)
		}
		attempts += al.Delivery.Attempts
	}
	if attempts != 3 {
		t.Errorf("%d attempts in all, want 3 (one retry)", attempts)
	}

	// The platform's budgets against the gateway's own quota for the key.
	var b struct {
		Available bool `json:"available"`
		Budgets   []struct {
			Origin    string `json:"origin"`
			Dimension string `json:"dimension"`
			Remaining string `json:"remaining"`
			Limit     string `json:"limit"`
		} `json:"budgets"`
	}
	a.must(200, "GET", "/applications/"+app+"/budgets", nil, &b)
	req, _ := http.NewRequest("GET", gw+"/openai/v1/quota", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var q struct {
		Limits []struct {
			Dimension string      `json:"dimension"`
			Remaining json.Number `json:"remaining"`
			Limit     json.Number `json:"limit"`
		} `json:"limits"`
	}
	err = json.NewDecoder(resp.Body).Decode(&q)
	resp.Body.Close()
	if err != nil || len(q.Limits) != 1 {
		t.Fatalf("quota: %+v %v", q, err)
	}
	if !b.Available || len(b.Budgets) != 1 || b.Budgets[0].Dimension != "tokens" || b.Budgets[0].Origin != "$.consumer.global.token" ||
		b.Budgets[0].Remaining != q.Limits[0].Remaining.String() || b.Budgets[0].Limit != q.Limits[0].Limit.String() {
		t.Fatalf("budgets %+v, gateway quota %+v", b, q)
	}
	t.Logf("remaining %s of %s (platform and gateway agree)", b.Budgets[0].Remaining, b.Budgets[0].Limit)

	serve.Signal(t, syscall.SIGTERM)
	if code := serve.WaitExit(t, 40*time.Second); code != 0 {
		t.Fatalf("sluice serve exited %d", code)
	}
}
