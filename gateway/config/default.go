package config

import (
	_ "embed"
	"errors"
	"fmt"
	"strings"
)

//go:embed default.yaml
var defaultYAML []byte

const (
	// MockUpstreamURL is where the default deployment points when no provider
	// key is set; the gateway command runs the mock upstream there.
	MockUpstreamURL = "http://127.0.0.1:9000"
	// OpenAIURL is the OpenAI API base (paths like /v1/chat/completions follow).
	OpenAIURL = "https://api.openai.com"
	// DemoKey is the API key the default deployment accepts in front of the
	// mock upstream (stored hashed). It is public: it never fronts a real
	// provider key.
	DemoKey = "sk-sluice-demo"
	// DefaultSource names the embedded deployment in errors and logs.
	DefaultSource = "default.yaml (embedded)"
)

// Environment variables the default deployment reads.
const (
	// EnvOpenAIKey switches the provider from the mock to OpenAI (or
	// EnvOpenAIBaseURL) with that key.
	EnvOpenAIKey = "OPENAI_API_KEY"
	// EnvOpenAIBaseURL is the OpenAI-compatible API the key is sent to
	// (default OpenAIURL); the OpenAI SDKs' variable of the same name ends in
	// /v1, which is accepted and removed.
	EnvOpenAIBaseURL = "OPENAI_BASE_URL"
)

// Default returns the embedded demo deployment: one OpenAI provider, one
// application "demo", and one route "default" at /openai with api-key-auth,
// model-access (all models) and per-application limits. env reads the
// environment (os.Getenv).
//
// Without OPENAI_API_KEY the provider is the mock upstream at
// MockUpstreamURL and the application's key is DemoKey. With it, the
// provider is OPENAI_BASE_URL (default OpenAIURL) with that key, and the
// application's key is key: the caller generates it (and shows it to the
// operator) so that the public DemoKey never spends a real account; key must
// then be set and differ from DemoKey. Without OPENAI_API_KEY, key is
// ignored.
func Default(env func(string) string, key string) (*Deployment, error) {
	d, err := ParseEnv(defaultYAML, DefaultSource, func(name string) (string, bool) {
		v := env(name)
		return v, v != ""
	})
	if err != nil {
		return nil, fmt.Errorf("embedded default deployment: %w", err)
	}
	secret := env(EnvOpenAIKey)
	if secret == "" {
		return d, nil
	}
	if key == "" || key == DemoKey {
		return nil, errors.New("default deployment: with " + EnvOpenAIKey + " set, the demo application needs a generated key, not the public demo key")
	}
	if msg := controlCharProblem(secret); msg != "" {
		return nil, fmt.Errorf("%s %s", EnvOpenAIKey, msg)
	}
	base := OpenAIURL
	if v := env(EnvOpenAIBaseURL); v != "" {
		base = strings.TrimSuffix(strings.TrimSuffix(v, "/"), "/v1")
		if msg := upstreamURLProblem(base); msg != "" {
			return nil, fmt.Errorf("%s: %s", EnvOpenAIBaseURL, msg)
		}
	}
	p := &d.Providers[0]
	p.URL = base
	p.ForwardHeaders = nil // the mock's fault headers
	p.Auth = &Auth{Header: "Authorization", Value: "Bearer " + secret}
	d.Applications[0].APIKeys = []string{HashKey(key)}
	return d, nil
}
