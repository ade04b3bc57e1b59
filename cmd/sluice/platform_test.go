package main

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"sluice/deployment"
)

// The counters flags give the counters section of the generated deployments,
// the URL from SLUICE_COUNTERS_REDIS_URL when the flag is empty; every
// refusal names its flag (or variable) and never shows the password.
func TestCountersFlags(t *testing.T) {
	const pw = "pw-DO-NOT-LEAK-55"
	env := func(url string) func(string) string {
		return func(name string) string {
			if name == countersRedisEnv {
				return url
			}
			return ""
		}
	}
	tests := []struct {
		name string
		args []string
		env  string
		want deployment.Counters
		err  string
	}{
		{name: "none", want: deployment.Counters{}},
		{name: "flag", args: []string{"--counters-redis", "redis://u:" + pw + "@h:6379/0", "--counters-key-prefix", "prod:",
			"--counters-failure-mode", "closed", "--counters-timeout", "2s", "--counters-dial-timeout", "1s"},
			want: deployment.Counters{Backend: "redis", Redis: deployment.Redis{URL: "redis://u:" + pw + "@h:6379/0", KeyPrefix: "prod:",
				FailureMode: "closed", ReadTimeout: deployment.Duration(2 * time.Second), WriteTimeout: deployment.Duration(2 * time.Second),
				DialTimeout: deployment.Duration(time.Second)}}},
		{name: "env", env: "rediss://h:6380/0", args: []string{"--counters-redis-cluster"},
			want: deployment.Counters{Backend: "redis", Redis: deployment.Redis{URL: "rediss://h:6380/0", Cluster: true}}},
		{name: "flag over env", env: "redis://env:1/0", args: []string{"--counters-redis", "redis://flag:1/0"},
			want: deployment.Counters{Backend: "redis", Redis: deployment.Redis{URL: "redis://flag:1/0"}}},
		{name: "option without url", args: []string{"--counters-failure-mode", "closed"}, err: "--counters-failure-mode needs --counters-redis (or SLUICE_COUNTERS_REDIS_URL)"},
		{name: "bad flag url", args: []string{"--counters-redis", "http://u:" + pw + "@h:1"}, err: "--counters-redis: want a redis:// or rediss:// URL with a host"},
		{name: "bad env url", env: "redis://u:" + pw + "@h:1/0?read_timeout=1s", err: "SLUICE_COUNTERS_REDIS_URL: URL option read_timeout is set by the store: set --counters-timeout instead"},
		{name: "failure mode", args: []string{"--counters-redis", "redis://h:1/0", "--counters-failure-mode", "maybe"}, err: `--counters-failure-mode: unknown failure mode "maybe"`},
		{name: "key prefix", args: []string{"--counters-redis", "redis://h:1/0", "--counters-key-prefix", "{a}"}, err: "--counters-key-prefix: must not contain braces"},
		{name: "cluster database", args: []string{"--counters-redis", "redis://h:1/3", "--counters-redis-cluster"}, err: "--counters-redis: database 3: Redis Cluster has only database 0"},
		{name: "negative timeout", args: []string{"--counters-redis", "redis://h:1/0", "--counters-timeout", "-1s"}, err: "--counters-timeout: must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("platform", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := addCountersFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			got, err := f.setting(env(tt.env))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				if strings.Contains(err.Error(), pw) {
					t.Fatalf("the error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Backend != tt.want.Backend || got.Redis.URL != tt.want.Redis.URL || got.Redis.Cluster != tt.want.Redis.Cluster ||
				got.Redis.KeyPrefix != tt.want.Redis.KeyPrefix || got.Redis.FailureMode != tt.want.Redis.FailureMode ||
				got.Redis.ReadTimeout != tt.want.Redis.ReadTimeout || got.Redis.WriteTimeout != tt.want.Redis.WriteTimeout ||
				got.Redis.DialTimeout != tt.want.Redis.DialTimeout {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// A bad counters flag stops `sluice platform` and `sluice serve` before they
// open anything: exit 2, the flag named on stderr.
func TestCountersFlagRefusedAtStart(t *testing.T) {
	t.Setenv(countersRedisEnv, "")
	for name, cmd := range map[string]func([]string, io.Writer, io.Writer) int{"platform": cmdPlatform, "serve": cmdServe} {
		t.Run(name, func(t *testing.T) {
			data := t.TempDir() + "/data"
			var stdout, stderr bytes.Buffer
			code := cmd([]string{"--data", data, "--admin-listen", "127.0.0.1:0", "--counters-redis", "redis://h:1/0", "--counters-failure-mode", "maybe"}, &stdout, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), "sluice "+name+": --counters-failure-mode: unknown failure mode") {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
		})
	}
}
