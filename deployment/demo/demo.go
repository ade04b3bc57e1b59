// Package demo is the embedded demo deployment that `sluice gateway` serves
// without --config: one provider (the built-in mock upstream, or OpenAI when
// OPENAI_API_KEY is set), one application and one route with limits. It is
// a document like any other, read with yamlfile, so it lives beside the
// document rather than in the wiring, which assembles services and owns no
// documents.
package demo

import (
	_ "embed"
	"errors"
	"fmt"
	"strings"

	"sluice/deployment"
	"sluice/deployment/yamlfile"
)

//go:embed default.yaml
var defaultYAML []byte

const (
	// MockUpstreamURL is where the default deployment points when no provider
	// key is set; the gateway command runs the mock upstream there.
	MockUpstreamURL = "http://127.0.0.1:9000"
	// OpenAIURL is the OpenAI API base (paths like /v1/chat/completions follow).
	OpenAIURL = "https://api.openai.com"
	// Key is the API key the demo deployment accepts in front of the mock
	// upstream (stored hashed). It is public: it never fronts a real provider
	// key.
	Key = "sk-sluice-demo"
	// Source names the embedded deployment in errors and logs.
	Source = "default.yaml (embedded)"
)

// Environment variables the demo deployment reads.
const (
	// EnvOpenAIKey switches the provider from the mock to OpenAI (or
	// EnvOpenAIBaseURL) with that key.
	EnvOpenAIKey = "OPENAI_API_KEY"
	// EnvOpenAIBaseURL is the OpenAI-compatible API the key is sent to
	// (default OpenAIURL); the OpenAI SDKs' variable of the same name ends in
	// /v1, which is accepted and removed.
	EnvOpenAIBaseURL = "OPENAI_BASE_URL"
)

// Deployment returns the embedded demo deployment: one OpenAI provider, one
// application "demo", and one route "default" at /openai with api-key-auth,
// model-access (all models) and per-application limits. env reads the
// environment (os.Getenv).
//
// Without OPENAI_API_KEY the provider is the mock upstream at
// MockUpstreamURL and the application's key is Key. With it, the provider
// is OPENAI_BASE_URL (default OpenAIURL) with that key, and the application's
// key is key: the caller generates it (and shows it to the operator) so that
// the public Key never spends a real account; key must then be set and
// differ from Key. Without OPENAI_API_KEY, key is ignored.
func Deployment(env func(string) string, key string) (*deployment.Deployment, error) {
	d, err := yamlfile.ParseEnv(defaultYAML, Source, func(name string) (string, bool) {
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
	if key == "" || key == Key {
		return nil, errors.New("default deployment: with " + EnvOpenAIKey + " set, the demo application needs a generated key, not the public demo key")
	}
	if msg := deployment.HeaderValueProblem(secret); msg != "" {
		return nil, fmt.Errorf("%s %s", EnvOpenAIKey, msg)
	}
	base := OpenAIURL
	if v := env(EnvOpenAIBaseURL); v != "" {
		base = strings.TrimSuffix(strings.TrimSuffix(v, "/"), "/v1")
		if msg := deployment.UpstreamURLProblem(base); msg != "" {
			return nil, fmt.Errorf("%s: %s", EnvOpenAIBaseURL, msg)
		}
	}
	p := &d.Providers[0]
	p.URL = base
	p.ForwardHeaders = nil // the mock's fault headers
	p.Auth = &deployment.Auth{Header: "Authorization", Value: "Bearer " + secret}
	d.Applications[0].APIKeys = []string{deployment.HashKey(key)}
	return d, nil
}
