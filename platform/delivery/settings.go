// Package delivery builds the deployment gateways serve from the store and
// delivers it: the current version, the rendered document per version, and
// long-poll waits for a newer one. It imports the store, the secrets box, the
// generator and the deployment document; never the API or the gateway.
package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"sluice/deployment"
	"sluice/platform/generate"
	"sluice/platform/secrets"
	"sluice/platform/store"
)

// Redacted stands for an upstream key in every document shown to people.
const Redacted = "[redacted]"

// Secrets says how upstream keys and the counters setting go into the
// document.
type Secrets struct {
	// Box opens sealed keys; nil, or Redact, writes Redacted instead. The
	// counters setting is always opened with Box (LoadSettings fails without
	// it when one is set) and, with Redact, masked (RedactCounters).
	Box    *secrets.Box
	Redact bool
}

// LoadSettings reads everything the deployment is generated from, in tx, at
// now (expired and revoked keys are left out).
func LoadSettings(ctx context.Context, tx store.Tx, sec Secrets, now time.Time) (generate.Settings, error) {
	var s generate.Settings
	sealed, err := tx.Counters(ctx)
	if err != nil {
		return s, err
	}
	if s.Counters, err = OpenCounters(sec.Box, sealed); err != nil {
		return s, err
	}
	if sec.Redact {
		s.Counters = RedactCounters(s.Counters)
	}
	providers, err := tx.ListProviders(ctx)
	if err != nil {
		return s, err
	}
	guardrails, err := tx.ListAllGuardrails(ctx)
	if err != nil {
		return s, err
	}
	byProvider := map[string][]generate.Guardrail{}
	for _, g := range guardrails {
		gg, err := GuardrailEntry(g)
		if err != nil {
			return s, err
		}
		byProvider[g.ProviderID] = append(byProvider[g.ProviderID], gg)
	}
	for _, p := range providers {
		gp, err := ProviderSettings(p, sec)
		if err != nil {
			return s, err
		}
		gp.Guardrails = byProvider[p.ID]
		s.Providers = append(s.Providers, gp)
	}
	apps, err := tx.ListApplications(ctx)
	if err != nil {
		return s, err
	}
	keys, err := tx.ListUsableKeys(ctx, now)
	if err != nil {
		return s, err
	}
	byApp := map[string][]generate.Key{}
	for _, k := range keys {
		byApp[k.ApplicationID] = append(byApp[k.ApplicationID], generate.Key{ID: k.ID, Hash: k.Hash, ExpiresAt: k.ExpiresAt})
	}
	for _, a := range apps {
		s.Applications = append(s.Applications, generate.Application{ID: a.ID, Name: a.Name, Providers: a.Providers, Keys: byApp[a.ID]})
	}
	return s, nil
}

// GuardrailEntry converts a stored guardrail.
func GuardrailEntry(g store.Guardrail) (generate.Guardrail, error) {
	out := generate.Guardrail{ID: g.ID, Name: g.Name, Version: g.Version}
	if len(g.Params) > 0 {
		p, err := DecodeParams(g.Params)
		if err != nil {
			return out, fmt.Errorf("guardrail %s: params: %w", g.ID, err)
		}
		out.Params = p
	}
	if len(out.Params) == 0 {
		out.Params = nil
	}
	return out, nil
}

// ProviderSettings converts a stored provider (without its guardrails).
func ProviderSettings(p store.Provider, sec Secrets) (generate.Provider, error) {
	out := generate.Provider{ID: p.ID, Name: p.Name, Type: p.Type, URL: p.URL, Targets: p.Targets,
		ForwardHeaders: p.ForwardHeaders, ApplicationHeader: p.ApplicationHeader}
	if len(out.Targets) == 0 {
		out.Targets = nil
	}
	if len(p.RateLimits) > 0 {
		if err := json.Unmarshal(p.RateLimits, &out.RateLimits); err != nil {
			return out, fmt.Errorf("provider %s: rate limits: %w", p.ID, err)
		}
	}
	if p.APIKeySealed != nil {
		key := Redacted
		if sec.Box != nil && !sec.Redact {
			b, err := sec.Box.Open(p.APIKeySealed, p.ID)
			if err != nil {
				return out, fmt.Errorf("provider %s: %w", p.ID, err)
			}
			key = string(b)
		}
		out.Auth = UpstreamAuth(p.Type, p.AuthHeader, key)
	}
	return out, nil
}

// UpstreamAuth is the header the key goes in: header, or the type's default
// (Authorization for openai, x-api-key for anthropic). Authorization carries
// "Bearer <key>", any other header the bare key.
func UpstreamAuth(typ, header, key string) *deployment.Auth {
	if header == "" {
		header = "Authorization"
		if typ == "anthropic" {
			header = "x-api-key"
		}
	}
	if strings.EqualFold(header, "Authorization") {
		return &deployment.Auth{Header: header, Value: "Bearer " + key}
	}
	return &deployment.Auth{Header: header, Value: key}
}

// DecodeParams decodes a params object with integers as int64 (and other
// numbers as float64), as the deployment loader types them.
func DecodeParams(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return normalize(m).(map[string]any), nil
}

func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalize(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normalize(e)
		}
		return x
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}
