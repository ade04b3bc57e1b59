package deployment

import (
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
)

func TestDurationYAML(t *testing.T) {
	var v struct {
		D Duration `yaml:"d"`
	}
	cases := []struct {
		src  string
		want time.Duration
		err  bool
	}{
		{"d: 90s", 90 * time.Second, false},
		{"d: 1h30m", 90 * time.Minute, false},
		{"d: 2d", 48 * time.Hour, false},
		{"d: 0s", 0, true},
		{"d: 1x", 0, true},
		{"d: -1h", 0, true},
	}
	for _, tc := range cases {
		v.D = 0
		err := yaml.Unmarshal([]byte(tc.src), &v)
		if (err != nil) != tc.err || (!tc.err && v.D.D() != tc.want) {
			t.Errorf("%s: got %v, %v", tc.src, v.D.D(), err)
		}
	}
	for d, want := range map[Duration]string{
		Duration(48 * time.Hour):   "2d",
		Duration(90 * time.Second): "1m30s",
	} {
		out, err := yaml.Marshal(map[string]Duration{"d": d})
		if err != nil || strings.TrimSpace(string(out)) != "d: "+want {
			t.Errorf("marshal %v: %q %v", d.D(), out, err)
		}
		var back Duration
		if err := back.UnmarshalText([]byte(d.String())); err != nil || back != d {
			t.Errorf("round trip %v: %v %v", d.D(), back, err)
		}
	}
}

func TestDurations(t *testing.T) {
	cases := []struct {
		in  string
		ok  bool
		out string
	}{
		{"1m", true, "1m0s"}, {"1h30m", true, "1h30m0s"}, {"1d", true, "24h0m0s"}, {"30d", true, "720h0m0s"},
		{"0s", false, ""}, {"-1h", false, ""}, {"1x", false, ""}, {"d", false, ""}, {"1.5d", false, ""},
	}
	for _, tc := range cases {
		d, err := ParseDuration(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("%q: err=%v want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if tc.ok && d.String() != tc.out {
			t.Errorf("%q = %s, want %s", tc.in, d, tc.out)
		}
	}
}
