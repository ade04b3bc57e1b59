package yamlfile

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"sluice/deployment"
	"sluice/policies"
)

const hashA = "sha256:1c590839af894cf25f9a5fe06929af05b377f60efbe55508ef93d251887b9213"

// header is a valid document of 14 lines; cases append from line 15.
const header = `apiVersion: sluice/v1
providers:
  - name: openai
    type: openai
    url: http://127.0.0.1:9000
applications:
  - id: app-a
    apiKeys: ["` + hashA + `"]
routes:
  - name: r1
    context: /openai
    provider: openai
    policies:
      - name: fake-auth
`

func env(vars map[string]string) LookupFunc {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// load parses src as deploy.yaml and, if that succeeds, checks it and its
// chains against the fake registry (policies.Check).
func load(t *testing.T, src string, vars map[string]string) (*deployment.Deployment, deployment.Errors) {
	t.Helper()
	d, err := ParseEnv([]byte(src), "deploy.yaml", env(vars))
	if err == nil {
		err = policies.Check(d, testRegistry())
	}
	if err == nil {
		return d, nil
	}
	var errs deployment.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error is %T, want deployment.Errors: %v", err, err)
	}
	return d, errs
}

// wantErrorPrefixes checks that errs are exactly len(want) errors, the i-th
// rendering (file:line:col: field: message) with want[i].
func wantErrorPrefixes(t *testing.T, errs deployment.Errors, want []string) {
	t.Helper()
	if len(errs) != len(want) {
		t.Errorf("got %d errors, want %d:\n%v", len(errs), len(want), errs)
	}
	for i := range min(len(errs), len(want)) {
		if !strings.HasPrefix(errs[i].Error(), want[i]) {
			t.Errorf("error %d:\n got %s\nwant %s...", i, errs[i], want[i])
		}
	}
}

func TestErrorsNameFileLineAndField(t *testing.T) {
	cases := []struct {
		name string
		src  string
		vars map[string]string
		// want is "line:col field" of the first error; msg a fragment of its message.
		want, msg string
	}{
		{
			name: "bad YAML",
			src:  header + "      - name: [unclosed\n",
			want: "15:15 ", msg: "invalid YAML",
		},
		{
			name: "unknown top-level key",
			src:  header + "extra: true\n",
			want: "15:1 extra", msg: `unknown field "extra"`,
		},
		{
			name: "unknown nested key",
			src:  header + "    contxt: /x\n",
			want: "15:5 routes[0].contxt", msg: "unknown field",
		},
		{
			name: "unknown policy",
			src:  header + "      - name: fake-nope\n",
			want: "15:15 routes[0].policies[1].name", msg: `unknown policy "fake-nope"`,
		},
		{
			name: "unknown policy version",
			src:  header + "      - name: fake-limit\n        version: v9\n",
			want: "16:18 routes[0].policies[1].version", msg: `no version "v9"`,
		},
		{
			name: "unknown param",
			src: header + `      - name: fake-limit
        params:
          totalTokenLimits: [{count: 10, duration: 1h}]
          consumerBasd: true
`,
			want: "18:11 routes[0].policies[1].params.consumerBasd", msg: "unknown parameter",
		},
		{
			name: "unknown nested param",
			src: header + `      - name: fake-limit
        params:
          totalTokenLimits:
            - count: 10
              duraton: 1h
`,
			want: "19:15 routes[0].policies[1].params.totalTokenLimits[0].duraton", msg: "unknown parameter",
		},
		{
			name: "wrong param type",
			src: header + `      - name: fake-limit
        params:
          totalTokenLimits:
            - count: ten
              duration: 1h
`,
			want: "18:22 routes[0].policies[1].params.totalTokenLimits[0].count", msg: "want integer",
		},
		{
			name: "missing required param",
			src: header + `      - name: fake-limit
        params:
          totalTokenLimits:
            - duration: 1h
`,
			want: "18:15 routes[0].policies[1].params.totalTokenLimits[0].count", msg: "required",
		},
		{
			name: "bad duration in params",
			src: header + `      - name: fake-limit
        params:
          totalTokenLimits:
            - count: 10
              duration: 1x
`,
			want: "19:25 routes[0].policies[1].params.totalTokenLimits[0].duration", msg: `invalid duration "1x"`,
		},
		{
			// "0s" matches the schema's pattern: the decoder's duration
			// hook refuses it (a mapstructure error, mapped by its field
			// name).
			name: "zero duration in params",
			src: header + `      - name: fake-limit
        params:
          totalTokenLimits:
            - count: 10
              duration: 0s
`,
			want: "19:25 routes[0].policies[1].params.totalTokenLimits[0].duration", msg: `invalid duration "0s": must be positive`,
		},
		{
			name: "param error raised by the constructor",
			src:  header + "      - name: fake-broken\n",
			want: "15:9 routes[0].policies[1].params.totalTokenLimits", msg: "at least one limit",
		},
		{
			name: "bad duration in the document",
			src:  header + "server:\n  shutdownGrace: soon\n",
			want: "16:18 server.shutdownGrace", msg: `invalid duration "soon"`,
		},
		{
			name: "duration given as a number",
			src:  header + "server:\n  shutdownGrace: 30\n",
			want: "16:18 server.shutdownGrace", msg: "expected a duration",
		},
		{
			name: "zero timeout",
			src:  header + "server:\n  writeTimeout: 0s\n",
			want: "16:17 server.writeTimeout", msg: `invalid duration "0s": must be positive`,
		},
		{
			name: "negative timeout",
			src:  header + "server:\n  readTimeout: -1s\n",
			want: "16:16 server.readTimeout", msg: `must be positive`,
		},
		{
			name: "wrong scalar type in the document",
			src:  header + "server:\n  maxRequestBytes: lots\n",
			want: "16:20 server.maxRequestBytes", msg: `expected an integer, got a string ("lots")`,
		},
		{
			name: "list where a mapping belongs",
			src:  header + "counters: [memory]\n",
			want: "15:11 counters", msg: "expected a mapping, got a list",
		},
		{
			name: "undefined env var",
			src:  header + "counters:\n  redis:\n    password: ${REDIS_PASSWORD}\n",
			want: "17:15 counters.redis.password", msg: "REDIS_PASSWORD is not set",
		},
		{
			name: "undefined env var inside a quoted string",
			src:  header + "counters:\n  redis:\n    password: \"p-${PW}\"\n",
			want: "17:18 counters.redis.password", msg: "PW is not set",
		},
		{
			name: "undefined env var in a block scalar",
			src:  header + "counters:\n  redis:\n    password: |\n      first\n      ${NOPE}\n",
			want: "19:1 counters.redis.password", msg: "NOPE is not set",
		},
		{
			name: "duplicate route",
			src:  header + "  - name: r1\n    context: /b\n    provider: openai\n",
			want: "15:11 routes[1].name", msg: `duplicate route name "r1"`,
		},
		{
			name: "duplicate context",
			src:  header + "  - name: r2\n    context: /openai\n    provider: openai\n",
			want: "16:14 routes[1].context", msg: "duplicate context",
		},
		{
			name: "missing provider",
			src:  header + "  - name: r2\n    context: /b\n",
			want: "15:5 routes[1].provider", msg: "required",
		},
		{
			name: "unknown provider",
			src:  header + "  - name: r2\n    context: /b\n    provider: nope\n",
			want: "17:15 routes[1].provider", msg: `unknown provider "nope"`,
		},
		{
			name: "policy order: a reader before its writer in the response phase",
			src:  header + "      - name: fake-cost\n      - name: fake-cost-limit\n",
			want: "16:9 routes[0].policies[2]", msg: "fake-cost",
		},
		{
			name: "duplicate YAML key",
			src:  header + "apiVersion: sluice/v1\n",
			want: "15:1 ", msg: "already defined",
		},
		{
			name: "missing apiVersion",
			src:  strings.Replace(header, "apiVersion: sluice/v1\n", "", 1),
			want: "1:1 apiVersion", msg: "required",
		},
		{
			name: "wrong apiVersion",
			src:  strings.Replace(header, "sluice/v1", "sluice/v2", 1),
			want: "1:13 apiVersion", msg: "unsupported version",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := load(t, tc.src, tc.vars)
			if len(errs) == 0 {
				t.Fatal("no error")
			}
			// Other problems may be reported too (a misspelt param is
			// also a missing one); the expected one must be among them.
			for _, e := range errs {
				if e.File != "deploy.yaml" {
					t.Errorf("file = %q", e.File)
				}
				at := strings.TrimSpace(fmt.Sprintf("%d:%d %s", e.Line, e.Col, e.Field))
				if at == strings.TrimSpace(tc.want) && strings.Contains(e.Message, tc.msg) {
					return
				}
			}
			t.Errorf("no error at %q containing %q; got:\n%v", tc.want, tc.msg, errs)
		})
	}
}

func TestAllProblemsReportedInFileOrder(t *testing.T) {
	src := `apiVersion: sluice/v1
bogus: 1
counters:
  backend: etcd
providers:
  - name: openai
    type: azure
    url: ftp://x
    timeout: 5x
  - name: openai
    type: anthropic
    targets: [https://a.example, "not a url"]
    auth: {value: secret}
applications:
  - id: default
    apiKeys: ["sha256:ABC"]
  - id: b
    apiKeys: ["` + hashA + `", "` + hashA + `"]
  - id: c
    apiKeys: ["` + hashA + `"]
routes:
  - name: "bad name"
    context: /x/
    provider: openai
  - name: ok
    context: /
    provider: openai
`
	_, err := ParseEnv([]byte(src), "all.yaml", env(nil))
	var errs deployment.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("got %v", err)
	}
	want := []string{
		"all.yaml:2:1: bogus: unknown field",
		"all.yaml:4:12: counters.backend: unknown backend \"etcd\"",
		"all.yaml:7:11: providers[0].type: unknown provider type \"azure\"",
		"all.yaml:8:10: providers[0].url: want an absolute http:// or https:// URL",
		"all.yaml:9:14: providers[0].timeout: invalid duration \"5x\"",
		"all.yaml:10:11: providers[1].name: duplicate provider name \"openai\"",
		"all.yaml:12:34: providers[1].targets[1]: want an absolute http:// or https:// URL",
		"all.yaml:13:5: providers[1].auth.header: required when auth is given",
		"all.yaml:15:9: applications[0].id: \"default\" is reserved",
		"all.yaml:16:15: applications[0].apiKeys[0]: want \"sha256:\"",
		"all.yaml:18:90: applications[1].apiKeys[1]: key listed twice",
		"all.yaml:20:15: applications[2].apiKeys[0]: key already belongs to application \"b\"",
		"all.yaml:22:11: routes[0].name: invalid route name \"bad name\"",
		"all.yaml:23:14: routes[0].context: context \"/x/\" must not end with /",
		"all.yaml:26:14: routes[1].context: \"/\" is not allowed",
	}
	wantErrorPrefixes(t, errs, want)
	if lines := strings.Split(err.Error(), "\n"); len(lines) != len(errs) {
		t.Errorf("Error() has %d lines for %d errors", len(lines), len(errs))
	}
}

func TestCountersValidation(t *testing.T) {
	cases := []struct {
		name, counters, field string
	}{
		{"redis needs an address", "counters:\n  backend: redis\n", "counters.redis.url"},
		{"redis url scheme", "counters:\n  backend: redis\n  redis: {url: \"http://x\"}\n", "counters.redis.url"},
		{"url and addrs", "counters:\n  backend: redis\n  redis: {url: \"redis://x:1\", addrs: [\"x:1\"]}\n", "counters.redis.addrs"},
		{"failure mode", "counters:\n  redis: {failureMode: maybe}\n", "counters.redis.failureMode"},
		{"braces in prefix", "counters:\n  redis: {keyPrefix: \"{x}\"}\n", "counters.redis.keyPrefix"},
		{"lease mode", "counters:\n  redis: {leases: {mode: always}}\n", "counters.redis.leases.mode"},
		{"lease ttl too short", "counters:\n  redis: {leases: {ttl: 10ms}}\n", "counters.redis.leases.ttl"},
		{"lease ttl too long", "counters:\n  redis: {leases: {ttl: 2m}}\n", "counters.redis.leases.ttl"},
		{"lease exclusion empty", "counters:\n  redis: {leases: {exclude: [{}]}}\n", "counters.redis.leases.exclude[0]"},
		{"lease exclusion route", "counters:\n  redis: {leases: {exclude: [{route: r2}]}}\n", "counters.redis.leases.exclude[0].route"},
		{"lease exclusion policy", "counters:\n  redis: {leases: {exclude: [{policy: fake-limit}]}}\n", "counters.redis.leases.exclude[0].policy"},
		{"lease exclusion policy on route", "counters:\n  redis: {leases: {exclude: [{route: r1, policy: fake-limit}]}}\n", "counters.redis.leases.exclude[0].policy"},
		{"capacity lease ttl too short", "counters:\n  redis: {capacityLeases: {ttl: 100ms}}\n", "counters.redis.capacityLeases.ttl"},
		{"capacity lease ttl too long", "counters:\n  redis: {capacityLeases: {ttl: 2m}}\n", "counters.redis.capacityLeases.ttl"},
		{"capacity lease renew too short", "counters:\n  redis: {capacityLeases: {renew: 1ms}}\n", "counters.redis.capacityLeases.renew"},
		{"capacity lease renew over half the ttl", "counters:\n  redis: {capacityLeases: {ttl: 2s, renew: 1500ms}}\n", "counters.redis.capacityLeases.renew"},
		{"capacity lease queued renew over renew", "counters:\n  redis: {capacityLeases: {renew: 500ms, queuedRenew: 600ms}}\n", "counters.redis.capacityLeases.queuedRenew"},
		{"capacity lease queued renew too short", "counters:\n  redis: {capacityLeases: {queuedRenew: 1ms}}\n", "counters.redis.capacityLeases.queuedRenew"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := load(t, header+tc.counters, nil)
			if len(errs) != 1 || errs[0].Field != tc.field {
				t.Fatalf("got %v, want one error at %s", errs, tc.field)
			}
		})
	}
	d, errs := load(t, header+"counters:\n  backend: redis\n  redis: {addrs: [\"a:1\", \"b:2\"], failureMode: closed}\n", nil)
	if errs != nil {
		t.Fatal(errs)
	}
	if d.Counters.Redis.FailureMode != "closed" || len(d.Counters.Redis.Addrs) != 2 {
		t.Errorf("redis = %+v", d.Counters.Redis)
	}
	d, errs = load(t, header+"counters:\n  redis:\n    leases:\n      mode: \"off\"\n      ttl: 5s\n      exclude: [{route: r1}, {policy: fake-auth}, {route: r1, policy: fake-auth}]\n", nil)
	if errs != nil {
		t.Fatal(errs)
	}
	if l := d.Counters.Redis.Leases; l.Mode != "off" || l.TTL.D() != 5*time.Second || len(l.Exclude) != 3 || l.Exclude[2] != (deployment.LeaseExclusion{Route: "r1", Policy: "fake-auth"}) {
		t.Errorf("leases = %+v", l)
	}
}

func TestDefaultsFilled(t *testing.T) {
	d, errs := load(t, header, nil)
	if errs != nil {
		t.Fatal(errs)
	}
	p := d.Providers[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"backend", d.Counters.Backend, "memory"},
		{"failureMode", d.Counters.Redis.FailureMode, "open"},
		{"keyPrefix", d.Counters.Redis.KeyPrefix, "sluice:"},
		{"lease mode", d.Counters.Redis.Leases.Mode, "auto"},
		{"lease ttl", d.Counters.Redis.Leases.TTL.D(), 2 * time.Second},
		{"maxRequestBytes", d.Server.MaxRequestBytes, int64(10 << 20)},
		{"shutdownGrace", d.Server.ShutdownGrace.D(), 30 * time.Second},
		{"readHeaderTimeout", d.Server.ReadHeaderTimeout.D(), 10 * time.Second},
		{"readTimeout", d.Server.ReadTimeout.D(), 30 * time.Second},
		{"writeTimeout", d.Server.WriteTimeout.D(), 30 * time.Second},
		{"timeout", p.Timeout.D(), 60 * time.Second},
		{"retries", *p.Retries, 2},
		{"policy version", d.Routes[0].Policies[0].Version, "v1"},
		{"application name", d.Applications[0].Name, "app-a"},
		{"source", d.Source, "deploy.yaml"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// Explicit values are kept, including zero retries.
	d, errs = load(t, strings.Replace(header, "    url: http://127.0.0.1:9000\n",
		"    url: http://127.0.0.1:9000\n    retries: 0\n    timeout: 1d\n", 1), nil)
	if errs != nil {
		t.Fatal(errs)
	}
	if *d.Providers[0].Retries != 0 || d.Providers[0].Timeout.D() != 24*time.Hour {
		t.Errorf("retries=%d timeout=%v", *d.Providers[0].Retries, d.Providers[0].Timeout)
	}
}

func TestEnvExpansion(t *testing.T) {
	src := header + `      - name: fake-limit
        params:
          totalTokenLimits:
            - count: ${LIMIT}
              duration: ${WINDOW}
    # a comment may mention ${UNSET} freely
counters:
  redis:
    password: "p-${PW}-$${LITERAL}-$HOME"
    username: ${EMPTY}x
`
	d, errs := load(t, src, map[string]string{"LIMIT": "500", "WINDOW": "1d", "PW": "s3cr3t", "EMPTY": ""})
	if errs != nil {
		t.Fatal(errs)
	}
	lim := d.Routes[0].Policies[1].Params["totalTokenLimits"].([]any)[0].(map[string]any)
	if lim["count"] != int64(500) || lim["duration"] != "1d" {
		t.Errorf("params = %#v (an unquoted ${VAR} takes the type of its value)", lim)
	}
	if got := d.Counters.Redis.Password; got != "p-s3cr3t-${LITERAL}-$HOME" {
		t.Errorf("password = %q", got)
	}
	if got := d.Counters.Redis.Username; got != "x" {
		t.Errorf("username = %q", got)
	}

	// A value with YAML syntax in it stays a value.
	d, errs = load(t, header+"counters:\n  redis:\n    password: ${PW}\n", map[string]string{"PW": "a: [b, #c\nd"})
	if errs != nil {
		t.Fatal(errs)
	}
	if d.Counters.Redis.Password != "a: [b, #c\nd" {
		t.Errorf("password = %q", d.Counters.Redis.Password)
	}

	// A quoted reference stays a string: the schema rejects it for a count.
	_, errs = load(t, header+"      - name: fake-limit\n        params: {totalTokenLimits: [{count: \"${LIMIT}\", duration: 1h}]}\n",
		map[string]string{"LIMIT": "500"})
	if len(errs) != 1 || errs[0].Field != "routes[0].policies[1].params.totalTokenLimits[0].count" || errs[0].Line != 16 {
		t.Errorf("got %v", errs)
	}

	for _, bad := range []string{"${}", "${1X}", "${OPEN", "${A-B}"} {
		_, errs := load(t, header+"counters:\n  redis:\n    password: \""+bad+"\"\n", nil)
		if len(errs) != 1 || errs[0].Line != 17 {
			t.Errorf("%s: got %v", bad, errs)
		}
	}
}

func TestAnchorsAndMergeKeys(t *testing.T) {
	src := `apiVersion: sluice/v1
providers:
  - &base
    name: openai
    type: openai
    url: http://127.0.0.1:9000
  - <<: *base
    name: openai-2
routes:
  - name: r1
    context: /a
    provider: openai-2
    policies: &chain
      - name: fake-limit
        params: {totalTokenLimits: [{count: 1, duration: 1h}]}
  - name: r2
    context: /b
    provider: openai
    policies: *chain
`
	d, errs := load(t, src, nil)
	if errs != nil {
		t.Fatal(errs)
	}
	if p := d.Providers[1]; p.Name != "openai-2" || p.URL != "http://127.0.0.1:9000" || p.Type != "openai" {
		t.Errorf("merged provider = %+v", p)
	}
	if len(d.Routes[1].Policies) != 1 || d.Routes[1].Policies[0].Name != "fake-limit" {
		t.Errorf("aliased chain = %+v", d.Routes[1].Policies)
	}
}

func TestBuildChains(t *testing.T) {
	d, errs := load(t, header+"      - name: fake-limit\n        params: {totalTokenLimits: [{count: 1, duration: 1h}]}\n"+
		"  - name: r2\n    context: /b\n    provider: openai\n", nil)
	if errs != nil {
		t.Fatal(errs)
	}
	// Check used stand-in services; serving needs real ones, and a nil one is
	// a wiring bug that BuildRoute reports.
	reg := testRegistry()
	if _, err := reg.BuildRoute(d, 0, nil); err == nil || !strings.Contains(err.Error(), "needs Services.Keys") {
		t.Errorf("nil services: %v", err)
	}
	chains := map[string]*policies.Chain{}
	for i, r := range d.Routes {
		ch, err := reg.BuildRoute(d, i, policies.StandInServices())
		if err != nil {
			t.Fatal(err)
		}
		chains[r.Name] = ch
	}
	if len(chains) != 2 || chains["r1"].Len() != 2 || chains["r2"].Len() != 0 {
		t.Fatalf("chains = %v", chains)
	}
	e := chains["r1"].Entries()[1]
	if e.Route.RouteName != "r1" || e.Route.APIName != "r1" || e.Route.Provider != "openai" ||
		e.Route.ProviderType != "openai" || e.Route.Attachment != "route" || e.Route.Position != 1 {
		t.Errorf("route info = %+v", e.Route)
	}
}

func TestEmptyAndMultiDocument(t *testing.T) {
	for src, want := range map[string]string{
		"":                         "deploy.yaml:1:1: the document is empty",
		"# nothing\n":              "deploy.yaml:1:1: the document is empty",
		header + "---\nfoo: bar\n": "deploy.yaml:16:1: only one YAML document is allowed",
	} {
		_, err := ParseEnv([]byte(src), "deploy.yaml", env(nil))
		if err == nil || err.Error() != want {
			t.Errorf("%q: got %v, want %s", src, err, want)
		}
	}
}

func TestValidateInMemoryDocument(t *testing.T) {
	d := &deployment.Deployment{APIVersion: deployment.APIVersion, Routes: []deployment.Route{{Name: "r", Context: "/r", Provider: "p"}}}
	err := deployment.Validate(d)
	if err == nil || err.Error() != `deployment: routes[0].provider: unknown provider "p" (defined: )` {
		t.Errorf("got %v", err)
	}
	d = &deployment.Deployment{APIVersion: deployment.APIVersion, Server: deployment.Server{WriteTimeout: deployment.Duration(-time.Second)}}
	if err := deployment.Validate(d); err == nil || err.Error() != "deployment: server.writeTimeout: must be positive" {
		t.Errorf("negative writeTimeout: got %v", err)
	}
}

func TestParseWithRegistryReportsEverything(t *testing.T) {
	src := header + `      - name: fake-nope
  - name: r2
    context: /b
    provider: nope
    policies: 5
`
	_, err := parse([]byte(src), "deploy.yaml", env(nil), policies.NewChecker(testRegistry()).CheckChains)
	var errs deployment.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("got %v", err)
	}
	want := []string{
		"deploy.yaml:15:15: routes[0].policies[1].name: unknown policy",
		"deploy.yaml:18:15: routes[1].provider: unknown provider",
		"deploy.yaml:19:15: routes[1].policies: expected a list, got an integer",
	}
	wantErrorPrefixes(t, errs, want)
}

func TestEveryBadEntryOfARouteReported(t *testing.T) {
	src := header + `      - name: fake-nope
      - name: fake-limit
        params: {bogus: 1}
      - name: fake-limit
        version: v2
`
	_, errs := load(t, src, nil)
	want := []string{
		"deploy.yaml:15:15: routes[0].policies[1].name: unknown policy",
		"deploy.yaml:17:18: routes[0].policies[2].params.bogus: unknown parameter",
		"deploy.yaml:19:18: routes[0].policies[3].version: policy \"fake-limit\" has no version \"v2\"",
	}
	wantErrorPrefixes(t, errs, want)
}
