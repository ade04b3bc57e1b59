package yamlfile

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"sluice/deployment"
	"sluice/policies"
	"sluice/policies/builtin"
)

// at is the "line:col" of the first occurrence of marker in doc (its first
// character), for expected error positions.
func at(t *testing.T, doc, marker string) string {
	t.Helper()
	i := strings.Index(doc, marker)
	if i < 0 {
		t.Fatalf("marker %q not in the document", marker)
	}
	line := strings.Count(doc[:i], "\n") + 1
	col := i - strings.LastIndex(doc[:i], "\n")
	return fmt.Sprintf("%d:%d", line, col)
}

// loadBuiltin parses src as deploy.yaml and checks it with the built-in
// policies, as `sluice validate` does; it returns every problem.
func loadBuiltin(t *testing.T, src string, vars map[string]string) deployment.Errors {
	t.Helper()
	d, err := ParseEnv([]byte(src), "deploy.yaml", env(vars))
	if err == nil {
		err = policies.Check(d, builtin.Registry())
	}
	if err == nil {
		return nil
	}
	var errs deployment.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error is %T, want deployment.Errors: %v", err, err)
	}
	return errs
}

// refuseDoc is a deployment with two applications (app-a, app-b) whose
// provider and route parts are given; %s placeholders: provider extra lines
// (6 spaces deep), the route's policies (6 spaces deep list items), and the
// document's tail (top level).
func refuseDoc(provider, policies, tail string) string {
	return `apiVersion: sluice/v1
providers:
  - name: openai
    type: openai
    url: http://127.0.0.1:9000
` + provider + `applications:
  - id: app-a
    apiKeys: ["` + hashA + `"]
  - id: app-b
routes:
  - name: r1
    context: /openai
    provider: openai
    policies:
      - name: api-key-auth
` + policies + tail
}

// TestConfigurationThatCannotWork: what would silently not apply, or fail
// only once traffic flows, is refused at load and by validate, at the
// offending field's file:line:col, without echoing secrets.
func TestConfigurationThatCannotWork(t *testing.T) {
	cases := []struct {
		name string
		doc  string
		vars map[string]string
		// marker locates the expected position in doc; field and msg are
		// the expected field path and a fragment of the message.
		marker, field, msg string
	}{
		{
			name: "model-access perApplication names an undefined application",
			doc: refuseDoc("", `      - name: model-access
        params:
          allow: ["gpt-4o-mini"]
          perApplication:
            app-a: ["gpt-4o"]
            app-typo: ["gpt-4o", "o3"]
`, ""),
			marker: "app-typo", field: "routes[0].policies[1].params.perApplication.app-typo",
			msg: `application "app-typo" is not defined in applications (defined: "app-a", "app-b")`,
		},
		{
			name: "model-access perApplication: default is not an application",
			doc: refuseDoc("", `      - name: model-access
        params:
          perApplication: {default: ["gpt-4o"]}
`, ""),
			marker: `["gpt-4o"]}`, field: "routes[0].policies[1].params.perApplication.default",
			msg: `"default" is not an application: requests without an application follow allow`,
		},
		{
			name: "token-based-ratelimit override names an undefined application",
			doc: refuseDoc("", `      - name: token-based-ratelimit
        params:
          consumerBased: true
          totalTokenLimits: [{count: 1000, duration: 1h}]
          overrides:
            - applications: [app-a, app-c]
              totalTokenLimits: [{count: 5000, duration: 1h}]
`, ""),
			marker: "app-c]", field: "routes[0].policies[1].params.overrides[0].applications[1]",
			msg: `application "app-c" is not defined`,
		},
		{
			name: "llm-cost-based-ratelimit override names an undefined application",
			doc: refuseDoc("", `      - name: llm-cost-based-ratelimit
        params:
          consumerBased: true
          budgetLimits: [{amount: 1, duration: 1d}]
          overrides: [{applications: [ghost], budgetLimits: [{amount: 5, duration: 1d}]}]
      - name: llm-cost
`, ""),
			marker: "ghost", field: "routes[0].policies[1].params.overrides[0].applications[0]",
			msg: `application "ghost" is not defined`,
		},
		{
			name:   "provider url ending in /v1",
			doc:    strings.Replace(refuseDoc("", "", ""), "url: http://127.0.0.1:9000", "url: https://api.openai.com/v1", 1),
			marker: "https://api.openai.com/v1", field: "providers[0].url",
			msg: `the url is the API base without /v1: the route path /v1/... is appended (write "https://api.openai.com")`,
		},
		{
			name: "provider target ending in /v1/",
			doc: strings.Replace(refuseDoc("", "", ""), "url: http://127.0.0.1:9000",
				`targets: ["http://127.0.0.1:9000", "https://openrouter.ai/api/v1/"]`, 1),
			marker: `"https://openrouter.ai`, field: "providers[0].targets[1]",
			msg: `the url is the API base without /v1: the route path /v1/... is appended (write "https://openrouter.ai/api")`,
		},
		{
			name:   "credential with a trailing newline from the environment",
			doc:    refuseDoc("    auth: {header: Authorization, value: \"Bearer ${KEY}\"}\n", "", ""),
			vars:   map[string]string{"KEY": "sk-secret-value\n"},
			marker: `"Bearer ${KEY}"`, field: "providers[0].auth.value",
			msg: "contains a line feed (\\n) at byte 22 (value not shown)",
		},
		{
			name:   "credential with a carriage return",
			doc:    refuseDoc("    auth: {header: x-api-key, value: \"${KEY}\"}\n", "", ""),
			vars:   map[string]string{"KEY": "sk-secret\r"},
			marker: `"${KEY}"`, field: "providers[0].auth.value", msg: "contains a carriage return",
		},
		{
			name:   "empty credential",
			doc:    refuseDoc("    auth: {header: Authorization, value: \"${KEY}\"}\n", "", ""),
			vars:   map[string]string{"KEY": ""},
			marker: `value:`, field: "providers[0].auth.value", msg: "empty: the provider would get an empty credential",
		},
		{
			name:   "credential with only the scheme",
			doc:    refuseDoc("    auth: {header: Authorization, value: \"Bearer ${KEY}\"}\n", "", ""),
			vars:   map[string]string{"KEY": ""},
			marker: `"Bearer ${KEY}"`, field: "providers[0].auth.value", msg: "has leading or trailing spaces",
		},
		{
			name:   "forwardHeaders names a credential",
			doc:    refuseDoc("    forwardHeaders: [x-mock-*, cookie]\n", "", ""),
			marker: "cookie]", field: "providers[0].forwardHeaders[1]", msg: "cookie is never forwarded",
		},
		{
			name:   "forwardHeaders names OpenAI-Organization",
			doc:    refuseDoc("    forwardHeaders: [OpenAI-Organization]\n", "", ""),
			marker: "OpenAI-Organization]", field: "providers[0].forwardHeaders[0]", msg: "OpenAI-Organization is never forwarded",
		},
		{
			name:   "applicationHeader is a pattern",
			doc:    refuseDoc("    applicationHeader: x-mock-*\n", "", ""),
			marker: "x-mock-*", field: "providers[0].applicationHeader", msg: "one field name (no pattern)",
		},
		{
			name:   "applicationHeader is a credential",
			doc:    refuseDoc("    applicationHeader: Authorization\n", "", ""),
			marker: "Authorization", field: "providers[0].applicationHeader", msg: "Authorization cannot carry the application",
		},
		{
			name:   "applicationHeader is the gateway's request id",
			doc:    refuseDoc("    applicationHeader: x-request-id\n", "", ""),
			marker: "x-request-id", field: "providers[0].applicationHeader", msg: "the gateway sends its own request id",
		},
		{
			name:   "forwardHeaders star alone",
			doc:    refuseDoc("    forwardHeaders: [\"*\"]\n", "", ""),
			marker: `"*"]`, field: "providers[0].forwardHeaders[0]", msg: `"*" alone is not allowed`,
		},
		{
			name:   "redis url with an unknown option",
			doc:    refuseDoc("", "", "counters:\n  backend: redis\n  redis: {url: \"redis://:pw-secret@10.0.0.1:6379/0?dial_timout=1s\"}\n"),
			marker: `"redis://`, field: "counters.redis.url", msg: "unexpected option: dial_timout",
		},
		{
			name:   "redis url with a database on Redis Cluster",
			doc:    refuseDoc("", "", "counters:\n  backend: redis\n  redis: {url: \"redis://10.0.0.1:6379/3\", cluster: true}\n"),
			marker: `"redis://`, field: "counters.redis.url", msg: "database 3: Redis Cluster has only database 0",
		},
		{
			name:   "redis url with a negative database",
			doc:    refuseDoc("", "", "counters:\n  backend: redis\n  redis: {url: \"redis://10.0.0.1:6379/-1\"}\n"),
			marker: `"redis://`, field: "counters.redis.url", msg: "database -1: Redis databases are numbered from 0",
		},
		{
			name:   "redis url option the store overrides",
			doc:    refuseDoc("", "", "counters:\n  backend: redis\n  redis: {url: \"redis://10.0.0.1:6379?max_retries=3\"}\n"),
			marker: `"redis://`, field: "counters.redis.url", msg: "URL option max_retries is set by the store: the store never retries",
		},
		{
			name:   "redis url with a bad port",
			doc:    refuseDoc("", "", "counters:\n  backend: redis\n  redis: {url: \"redis://:pw-secret@10.0.0.1:63x9\"}\n"),
			marker: `"redis://`, field: "counters.redis.url", msg: "invalid URL: invalid port",
		},
		{
			name:   "redis tls with a url",
			doc:    refuseDoc("", "", "counters:\n  backend: redis\n  redis: {url: \"rediss://10.0.0.1:6380\", tls: true}\n"),
			marker: "true}", field: "counters.redis.tls", msg: "tls applies to addrs; with url, TLS is chosen by the scheme",
		},
		{
			name:   "redis username without a password",
			doc:    refuseDoc("", "", "counters:\n  backend: redis\n  redis: {addrs: [\"10.0.0.1:6379\"], username: sluice}\n"),
			marker: "sluice}", field: "counters.redis.username", msg: "a username without a password",
		},
		{
			name:   "redis password twice",
			doc:    refuseDoc("", "", "counters:\n  backend: redis\n  redis: {url: \"redis://u:pw-secret@10.0.0.1:6379\", password: other}\n"),
			marker: "other}", field: "counters.redis.password", msg: "the url has a password too",
		},
		{
			name:   "redis addr without a numeric port",
			doc:    refuseDoc("", "", "counters:\n  backend: redis\n  redis: {addrs: [\"10.0.0.1:6379\", \"10.0.0.2:redis\"]}\n"),
			marker: `"10.0.0.2`, field: "counters.redis.addrs[1]", msg: `want host:port, got "10.0.0.2:redis"`,
		},
		{
			name:   "redis negative pool size",
			doc:    refuseDoc("", "", "counters:\n  backend: redis\n  redis: {addrs: [\"10.0.0.1:6379\"], poolSize: -1}\n"),
			marker: "-1}", field: "counters.redis.poolSize", msg: "must not be negative",
		},
		{
			name:   "metrics token with a newline",
			doc:    refuseDoc("", "", "server:\n  metricsToken: \"${TOKEN}\"\n"),
			vars:   map[string]string{"TOKEN": "tok-secret\n"},
			marker: `"${TOKEN}"`, field: "server.metricsToken", msg: "contains a line feed",
		},
		{
			name:   "cors without origins",
			doc:    refuseDoc("", "", "    cors: {maxAge: 10m}\n"),
			marker: "cors:", field: "routes[0].cors.allowOrigins", msg: "required",
		},
		{
			name:   "cors origin with a path",
			doc:    refuseDoc("", "", "    cors: {allowOrigins: [\"https://app.example.com/\"]}\n"),
			marker: `"https://app`, field: "routes[0].cors.allowOrigins[0]", msg: "an origin is scheme://host[:port]",
		},
		{
			name:   "cors bad expose header",
			doc:    refuseDoc("", "", "    cors: {allowOrigins: [\"*\"], exposeHeaders: [\"x y\"]}\n"),
			marker: `"x y"`, field: "routes[0].cors.exposeHeaders[0]", msg: `invalid header name "x y"`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := loadBuiltin(t, tc.doc, tc.vars)
			if len(errs) != 1 {
				t.Fatalf("got %d errors, want 1:\n%v\n%s", len(errs), errs, tc.doc)
			}
			want := "deploy.yaml:" + at(t, tc.doc, tc.marker) + ": " + tc.field + ": "
			got := errs[0].Error()
			if !strings.HasPrefix(got, want) || !strings.Contains(got, tc.msg) {
				t.Fatalf("error:\n got %s\nwant %s...%s...", got, want, tc.msg)
			}
			for _, secret := range []string{"sk-secret", "pw-secret", "tok-secret"} {
				if strings.Contains(got, secret) {
					t.Fatalf("the error shows a secret: %s", got)
				}
			}
		})
	}
}

// TestConfigurationThatWorks: the accepted forms next to the refused ones.
func TestConfigurationThatWorks(t *testing.T) {
	docs := map[string]string{
		"overrides for requests without an application": refuseDoc("", `      - name: token-based-ratelimit
        params:
          consumerBased: true
          totalTokenLimits: [{count: 1000, duration: 1h}]
          overrides: [{applications: [default, app-b], totalTokenLimits: [{count: 10, duration: 1h}]}]
      - name: model-access
        params: {perApplication: {app-a: ["gpt-4o"], app-b: []}}
`, ""),
		"a path before /v1 and forwarded prefixes": strings.Replace(refuseDoc("    forwardHeaders: [x-mock-*, X-Trace-Id]\n    applicationHeader: X-Mock-Tenant\n", "", ""),
			"url: http://127.0.0.1:9000", "url: https://gateway.example.com/v1beta/openai", 1),
		"redis url with options the store leaves alone": refuseDoc("", "", "counters:\n  backend: redis\n  redis: {url: \"rediss://user:pw@10.0.0.1:6380/2?client_name=sluice&skip_verify=false\"}\n"),
		"redis cluster addrs with credentials":          refuseDoc("", "", "counters:\n  backend: redis\n  redis: {addrs: [\"a:1\", \"b:2\"], username: u, password: p, tls: true}\n"),
		"cors with every field":                         refuseDoc("", "", "    cors: {allowOrigins: [\"https://app.example.com\", \"http://localhost:5173\"], allowHeaders: [x-trace-*], exposeHeaders: [openai-processing-ms], maxAge: 10m}\n"),
		"metrics token":                                 refuseDoc("", "", "server: {metricsToken: \"${TOKEN}\"}\n"),
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			if errs := loadBuiltin(t, doc, map[string]string{"TOKEN": "t0k3n"}); errs != nil {
				t.Fatalf("refused:\n%v\n%s", errs, doc)
			}
		})
	}
}

// TestApplicationRefsReportedWithOtherProblems: an undefined application is
// reported alongside the route's other problems, not instead of them.
func TestApplicationRefsReportedWithOtherProblems(t *testing.T) {
	doc := refuseDoc("", `      - name: model-access
        params: {perApplication: {nobody: ["gpt-4o"]}}
      - name: token-based-ratelimit
        params: {totalTokenLimits: [{count: 1, duration: 1x}]}
`, "")
	errs := loadBuiltin(t, doc, nil)
	wantErrorPrefixes(t, errs, []string{
		"deploy.yaml:" + at(t, doc, "nobody") + ": routes[0].policies[1].params.perApplication.nobody: application \"nobody\"",
		"deploy.yaml:" + at(t, doc, "1x") + ": routes[0].policies[2].params.totalTokenLimits[0].duration: invalid duration",
	})
}
