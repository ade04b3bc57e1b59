package config

import (
	_ "embed"
	"fmt"
)

//go:embed default.yaml
var defaultYAML []byte

const (
	// MockUpstreamURL is where the default deployment points when no provider
	// key is set; the gateway command runs the mock upstream there.
	MockUpstreamURL = "http://127.0.0.1:9000"
	// OpenAIURL is the OpenAI API base (paths like /v1/chat/completions follow).
	OpenAIURL = "https://api.openai.com"
	// DemoKey is the API key the default deployment accepts (stored hashed).
	DemoKey = "sk-sluice-demo"
	// DefaultSource names the embedded deployment in errors and logs.
	DefaultSource = "default.yaml (embedded)"
)

// Default returns the embedded demo deployment: one OpenAI provider, one
// application with the key DemoKey, and one route "default" at /openai with
// api-key-auth and model-access (all models). env reads the environment
// (os.Getenv): when OPENAI_API_KEY is empty the provider is the mock upstream
// at MockUpstreamURL, else api.openai.com with that key.
func Default(env func(string) string) (*Deployment, error) {
	d, err := ParseEnv(defaultYAML, DefaultSource, func(name string) (string, bool) {
		v := env(name)
		return v, v != ""
	})
	if err != nil {
		return nil, fmt.Errorf("embedded default deployment: %w", err)
	}
	if key := env("OPENAI_API_KEY"); key != "" {
		p := &d.Providers[0]
		p.URL = OpenAIURL
		p.Auth = &Auth{Header: "Authorization", Value: "Bearer " + key}
	}
	return d, nil
}
