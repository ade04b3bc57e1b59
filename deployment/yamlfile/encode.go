package yamlfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"sluice/deployment"
)

// YAML renders d as the YAML that `sluice gateway --config` reads. Empty
// fields are left out; every "${" in a string value is written "$${", so the
// loader's ${VAR} expansion gives back the exact text.
func YAML(d *deployment.Deployment) ([]byte, error) {
	return yaml.MarshalWithOptions(tree(d, escape), yaml.IndentSequence(true))
}

// JSON renders d as JSON, with the same field names and order as YAML.
func JSON(d *deployment.Deployment) ([]byte, error) {
	var b bytes.Buffer
	if err := writeJSON(&b, tree(d, func(s string) any { return s })); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Loadable renders d as the JSON text gateways receive: JSON is YAML, so
// ParseRendered and `sluice gateway --config` read it, and it renders an order
// of magnitude faster than block YAML. Like YAML, it writes every "${" as
// "$${".
func Loadable(d *deployment.Deployment) ([]byte, error) {
	var b bytes.Buffer
	if err := writeJSON(&b, tree(d, func(s string) any { return strings.ReplaceAll(s, "${", "$${") })); err != nil {
		return nil, err
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

// escape prepares a string value for YAML: "${" becomes "$${", and a string
// goccy/go-yaml would not read back as written (".inf" written unquoted is
// read as a float; tabs and other control characters are lost) is written
// double-quoted with JSON escapes.
func escape(s string) any {
	s = strings.ReplaceAll(s, "${", "$${")
	if specialFloatRE.MatchString(s) || strings.ContainsFunc(s, func(r rune) bool { return (r < 0x20 && r != '\n') || r == 0x7f }) {
		return quoted(s)
	}
	return s
}

var specialFloatRE = regexp.MustCompile(`^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$`)

// quoted is a string written as a double-quoted YAML scalar.
type quoted string

// MarshalYAML writes q as a JSON string, a valid double-quoted YAML scalar.
func (q quoted) MarshalYAML() ([]byte, error) { return json.Marshal(string(q)) }

// tree builds the document as ordered mappings (yaml.MapSlice), lists and
// scalars, passing every string value (not keys) through str.
func tree(d *deployment.Deployment, str func(string) any) yaml.MapSlice {
	var m obj
	m.add("apiVersion", str(d.APIVersion))
	var srv obj
	if d.Server.MaxRequestBytes != 0 {
		srv.add("maxRequestBytes", d.Server.MaxRequestBytes)
	}
	if d.Server.ShutdownGrace != 0 {
		srv.add("shutdownGrace", d.Server.ShutdownGrace.String())
	}
	m.addObj("server", srv)
	m.addObj("counters", counters(d.Counters, str))
	providers := make([]any, 0, len(d.Providers))
	for _, p := range d.Providers {
		var o obj
		o.add("name", str(p.Name))
		o.add("type", str(p.Type))
		if p.URL != "" {
			o.add("url", str(p.URL))
		}
		if len(p.Targets) > 0 {
			o.add("targets", strs(p.Targets, str))
		}
		if p.Auth != nil {
			var a obj
			a.add("header", str(p.Auth.Header))
			a.add("value", str(p.Auth.Value))
			o.add("auth", yaml.MapSlice(a))
		}
		if p.Timeout != 0 {
			o.add("timeout", p.Timeout.String())
		}
		if p.Retries != nil {
			o.add("retries", *p.Retries)
		}
		if len(p.ForwardHeaders) > 0 {
			o.add("forwardHeaders", strs(p.ForwardHeaders, str))
		}
		if p.ApplicationHeader != "" {
			o.add("applicationHeader", str(p.ApplicationHeader))
		}
		if c := p.Capacity; c != nil {
			var co obj
			if c.MaxConcurrent != 0 {
				co.add("maxConcurrent", c.MaxConcurrent)
			}
			if c.MaxTokensInFlight != 0 {
				co.add("maxTokensInFlight", c.MaxTokensInFlight)
			}
			o.add("capacity", yaml.MapSlice(co))
		}
		providers = append(providers, yaml.MapSlice(o))
	}
	m.add("providers", providers)
	apps := make([]any, 0, len(d.Applications))
	for _, a := range d.Applications {
		var o obj
		o.add("id", str(a.ID))
		if a.Name != "" {
			o.add("name", str(a.Name))
		}
		if len(a.APIKeys) > 0 {
			o.add("apiKeys", strs(a.APIKeys, str))
		}
		if len(a.Keys) > 0 {
			keys := make([]any, len(a.Keys))
			for i, k := range a.Keys {
				var ko obj
				ko.add("id", str(k.ID))
				ko.add("hash", str(k.Hash))
				if k.ExpiresAt != nil {
					ko.add("expiresAt", k.ExpiresAt.UTC().Format(time.RFC3339Nano))
				}
				keys[i] = yaml.MapSlice(ko)
			}
			o.add("keys", keys)
		}
		if ad := a.Admission; ad != nil {
			var ao obj
			if ad.Class != "" {
				ao.add("class", str(ad.Class))
			}
			if ad.Weight != 0 {
				ao.add("weight", number(ad.Weight))
			}
			o.add("admission", yaml.MapSlice(ao))
		}
		apps = append(apps, yaml.MapSlice(o))
	}
	m.add("applications", apps)
	routes := make([]any, 0, len(d.Routes))
	for _, r := range d.Routes {
		var o obj
		o.add("name", str(r.Name))
		o.add("context", str(r.Context))
		o.add("provider", str(r.Provider))
		entries := make([]any, len(r.Policies))
		for i, p := range r.Policies {
			var e obj
			e.add("name", str(p.Name))
			if p.Version != "" {
				e.add("version", str(p.Version))
			}
			if p.Resources != nil {
				var rs obj
				if len(p.Resources.Include) > 0 {
					rs.add("include", strs(p.Resources.Include, str))
				}
				if len(p.Resources.Exclude) > 0 {
					rs.add("exclude", strs(p.Resources.Exclude, str))
				}
				e.add("resources", yaml.MapSlice(rs))
			}
			if len(p.Params) > 0 {
				e.add("params", value(p.Params, str))
			}
			entries[i] = yaml.MapSlice(e)
		}
		o.add("policies", entries)
		routes = append(routes, yaml.MapSlice(o))
	}
	m.add("routes", routes)
	if d.Admission != nil {
		m.add("admission", yaml.MapSlice(admissionTree(d.Admission)))
	}
	return yaml.MapSlice(m)
}

func admissionTree(a *deployment.Admission) obj {
	var o obj
	if a.InputWeight != 0 {
		o.add("inputWeight", number(a.InputWeight))
	}
	if a.OutputWeight != 0 {
		o.add("outputWeight", number(a.OutputWeight))
	}
	if len(a.Classes) > 0 {
		names := make([]string, 0, len(a.Classes))
		for n := range a.Classes {
			names = append(names, n)
		}
		sort.Strings(names)
		var cs obj
		for _, n := range names {
			c := a.Classes[n]
			var co obj
			for _, kv := range []struct {
				k string
				v float64
			}{{"reservedShare", c.ReservedShare}, {"maxShare", c.MaxShare}, {"maxQueuedWork", c.MaxQueuedWork}, {"burstHeadroom", c.BurstHeadroom}} {
				if kv.v != 0 {
					co.add(kv.k, number(kv.v))
				}
			}
			if c.DefaultDeadline != 0 {
				co.add("defaultDeadline", c.DefaultDeadline.String())
			}
			if c.MaxDeadline != 0 {
				co.add("maxDeadline", c.MaxDeadline.String())
			}
			cs.add(n, yaml.MapSlice(co))
		}
		o.add("classes", yaml.MapSlice(cs))
	}
	return o
}

func counters(c deployment.Counters, str func(string) any) obj {
	var o obj
	if c.Backend != "" {
		o.add("backend", str(c.Backend))
	}
	r := c.Redis
	var ro obj
	for _, kv := range []struct {
		k string
		v string
	}{{"url", r.URL}, {"username", r.Username}, {"password", r.Password}, {"keyPrefix", r.KeyPrefix}, {"failureMode", r.FailureMode}} {
		if kv.v != "" {
			ro.add(kv.k, str(kv.v))
		}
	}
	if len(r.Addrs) > 0 {
		ro.add("addrs", strs(r.Addrs, str))
	}
	if r.Cluster {
		ro.add("cluster", true)
	}
	if r.TLS {
		ro.add("tls", true)
	}
	for _, kv := range []struct {
		k string
		v deployment.Duration
	}{{"dialTimeout", r.DialTimeout}, {"readTimeout", r.ReadTimeout}, {"writeTimeout", r.WriteTimeout}} {
		if kv.v != 0 {
			ro.add(kv.k, kv.v.String())
		}
	}
	if r.PoolSize != 0 {
		ro.add("poolSize", r.PoolSize)
	}
	var cl obj
	for _, kv := range []struct {
		k string
		v deployment.Duration
	}{{"ttl", r.CapacityLeases.TTL}, {"renew", r.CapacityLeases.Renew}, {"queuedRenew", r.CapacityLeases.QueuedRenew}} {
		if kv.v != 0 {
			cl.add(kv.k, kv.v.String())
		}
	}
	ro.addObj("capacityLeases", cl)
	o.addObj("redis", ro)
	return o
}

// number is f as the encoders should write it: a whole number as an
// integer (goccy/go-yaml would write 1e6 as "1e+06"), anything else as is.
func number(f float64) any {
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return int64(f)
	}
	return f
}

type obj yaml.MapSlice

func (o *obj) add(k string, v any) { *o = append(*o, yaml.MapItem{Key: k, Value: v}) }

func (o *obj) addObj(k string, v obj) {
	if len(v) > 0 {
		o.add(k, yaml.MapSlice(v))
	}
}

func strs(xs []string, str func(string) any) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = str(x)
	}
	return out
}

// value converts a params value: maps get sorted keys, strings pass str.
func value(v any, str func(string) any) any {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make(yaml.MapSlice, len(keys))
		for i, k := range keys {
			out[i] = yaml.MapItem{Key: k, Value: value(x[k], str)}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = value(e, str)
		}
		return out
	case []string:
		return strs(x, str)
	case string:
		return str(x)
	}
	return v
}

// writeJSON encodes a tree built by tree, keeping mapping order.
func writeJSON(b *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case yaml.MapSlice:
		b.WriteByte('{')
		for i, it := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			k, _ := json.Marshal(fmt.Sprint(it.Key))
			b.Write(k)
			b.WriteByte(':')
			if err := writeJSON(b, it.Value); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSON(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	default:
		enc, err := json.Marshal(x)
		if err != nil {
			return err
		}
		b.Write(enc)
	}
	return nil
}
