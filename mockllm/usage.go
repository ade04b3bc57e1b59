package mockllm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
)

// DefaultUsageHeader is the request header whose value names the tenant in
// GET /mock/usage (Options.UsageHeader overrides it).
const DefaultUsageHeader = "X-Mock-Tenant"

// Counts are what the mock served: one tenant, one of its models, or all.
type Counts struct {
	// Requests counts requests the mock accepted (a valid body, no
	// x-mock-status fault).
	Requests int64 `json:"requests"`
	// Completed counts requests answered in full.
	Completed int64 `json:"completed"`
	// Cancelled counts requests whose client went away before the end (or
	// whose stream was cut by x-mock-drop-after).
	Cancelled int64 `json:"cancelled"`
	// PromptTokens counts prompt tokens processed: a request's prompt once
	// it was admitted and prefilled (at once without a capacity).
	PromptTokens int64 `json:"prompt_tokens"`
	// CompletionTokens counts output tokens written to the client: every
	// token event a stream wrote, all of a body's tokens once it was written.
	CompletionTokens int64 `json:"completion_tokens"`
}

func (u *Counts) add(o Counts) {
	u.Requests += o.Requests
	u.Completed += o.Completed
	u.Cancelled += o.Cancelled
	u.PromptTokens += o.PromptTokens
	u.CompletionTokens += o.CompletionTokens
}

// TenantUsage is what the mock served one tenant: its counts, and the same
// by model (the model the mock reported serving: the request's).
type TenantUsage struct {
	Counts
	Models map[string]Counts `json:"models"`
}

// Usage is the body of GET /mock/usage: counters since the start or the
// last DELETE (no period).
type Usage struct {
	// Tenants is by tenant: the usage header's value, else "key:" and the
	// first 12 hex digits of the SHA-256 of the request's API key
	// (Authorization bearer or x-api-key), else "anonymous".
	Tenants map[string]TenantUsage `json:"tenants"`
	Total   Counts                 `json:"total"`
	// Engine is the saturable model's state (absent without a capacity).
	Engine *EngineStats `json:"engine,omitempty"`
}

// usageBook counts what each tenant was served, by model. Safe for
// concurrent use.
type usageBook struct {
	header string
	mu     sync.Mutex
	byKey  map[string]map[string]*Counts // tenant, model
}

func newUsageBook(header string) *usageBook {
	if header == "" {
		header = DefaultUsageHeader
	}
	return &usageBook{header: header, byKey: map[string]map[string]*Counts{}}
}

// tenant names the tenant of a request.
func (b *usageBook) tenant(h http.Header) string {
	if v := h.Get(b.header); v != "" {
		return v
	}
	key := h.Get("X-Api-Key")
	if v, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer "); ok && key == "" {
		key = v
	}
	if key == "" {
		return "anonymous"
	}
	sum := sha256.Sum256([]byte(key))
	return "key:" + hex.EncodeToString(sum[:6])
}

func (b *usageBook) record(tenant, model string, u Counts) {
	b.mu.Lock()
	t := b.byKey[tenant]
	if t == nil {
		t = map[string]*Counts{}
		b.byKey[tenant] = t
	}
	m := t[model]
	if m == nil {
		m = &Counts{}
		t[model] = m
	}
	m.add(u)
	b.mu.Unlock()
}

func (b *usageBook) snapshot() Usage {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := Usage{Tenants: make(map[string]TenantUsage, len(b.byKey))}
	for k, models := range b.byKey {
		t := TenantUsage{Models: make(map[string]Counts, len(models))}
		for m, c := range models {
			t.Models[m] = *c
			t.add(*c)
		}
		u.Tenants[k] = t
		u.Total.add(t.Counts)
	}
	return u
}

func (b *usageBook) reset() {
	b.mu.Lock()
	b.byKey = map[string]map[string]*Counts{}
	b.mu.Unlock()
}

func (s *server) serveUsage(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodDelete {
		s.usage.reset()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	u := s.usage.snapshot()
	if s.engine != nil {
		st := s.engine.stats()
		u.Engine = &st
	}
	b, _ := json.Marshal(u)
	writeJSON(w, http.StatusOK, b)
}
