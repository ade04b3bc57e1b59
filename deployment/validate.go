package deployment

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

var (
	routeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	// Application ids go into counter keys ("route:app") and Redis hash tags,
	// so ':', '{', '}' and whitespace are excluded.
	appIDRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]*$`)
	keyHashRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	// headerNameRE is an HTTP field name (RFC 9110 token).
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// reservedAppID is the consumer key of requests without an application; an
// application with that id would share their counters.
const reservedAppID = "default"

// Validate checks a deployment's structure: everything but what policy
// params mean, which policies.Check checks against the registry. Empty fields
// that have defaults are accepted. It returns Errors (in file order) or nil.
func Validate(d *Deployment) error {
	return validate(d).Normalize().Err()
}

func validate(d *Deployment) Errors {
	var errs Errors
	add := func(e *Error) { errs = append(errs, e) }

	switch {
	case d.APIVersion == "":
		add(d.ErrorAt("apiVersion", true, "required: set apiVersion: %s", APIVersion))
	case d.APIVersion != APIVersion:
		add(d.ErrorAt("apiVersion", false, "unsupported version %q: this gateway reads %s", d.APIVersion, APIVersion))
	}

	if d.Server.MaxRequestBytes < 0 {
		add(d.ErrorAt("server.maxRequestBytes", false, "must be positive"))
	}
	// Parsed durations are positive already; a deployment built in memory is
	// checked here.
	for _, f := range []struct {
		field string
		v     Duration
	}{
		{"server.shutdownGrace", d.Server.ShutdownGrace},
		{"server.readHeaderTimeout", d.Server.ReadHeaderTimeout},
		{"server.readTimeout", d.Server.ReadTimeout},
		{"server.writeTimeout", d.Server.WriteTimeout},
	} {
		if f.v < 0 {
			add(d.ErrorAt(f.field, false, "must be positive"))
		}
	}
	if t := d.Server.MetricsToken; t != "" {
		if msg := HeaderValueProblem(t); msg != "" {
			add(d.ErrorAt("server.metricsToken", false, "%s", msg))
		} else if strings.ContainsAny(t, " ") {
			add(d.ErrorAt("server.metricsToken", false, "must not contain spaces (value not shown): it is sent as \"Authorization: Bearer <token>\""))
		}
	}
	validateCounters(d, add)
	validateMeter(d, add)
	providerTypes := validateProviders(d, add)
	validateApplications(d, add)
	validateRoutes(d, providerTypes, add)
	return errs
}

func validateCounters(d *Deployment, add func(*Error)) {
	c := d.Counters
	switch c.Backend {
	case "", "memory":
	case "redis":
		r := c.Redis
		switch {
		case r.URL == "" && len(r.Addrs) == 0:
			add(d.ErrorAt("counters.redis.url", true, "the redis backend needs counters.redis.url or counters.redis.addrs"))
		case r.URL != "" && len(r.Addrs) > 0:
			add(d.ErrorAt("counters.redis.addrs", true, "give counters.redis.url or counters.redis.addrs, not both"))
		}
	default:
		add(d.ErrorAt("counters.backend", false, "unknown backend %q: want memory or redis", c.Backend))
	}
	r := c.Redis
	for _, p := range redisProblems(r) {
		add(d.ErrorAt("counters.redis."+p.field, p.wantKey, "%s", p.msg))
	}
	if strings.ContainsAny(r.KeyPrefix, "{} \t\n") {
		add(d.ErrorAt("counters.redis.keyPrefix", false, "must not contain braces or whitespace (keys carry Redis Cluster hash tags)"))
	}
	switch r.FailureMode {
	case "", "open", "closed":
	default:
		add(d.ErrorAt("counters.redis.failureMode", false, "unknown failure mode %q: want open or closed", r.FailureMode))
	}
	validateLeases(d, add)
	validateCapacityLeases(d, add)
}

// Bounds of counters.redis.capacityLeases.
const (
	MinCapacityLeaseTTL   = Duration(500 * time.Millisecond)
	MaxCapacityLeaseTTL   = Duration(time.Minute)
	MinCapacityLeaseRenew = Duration(10 * time.Millisecond)
)

func validateCapacityLeases(d *Deployment, add func(*Error)) {
	c := d.Counters.Redis.CapacityLeases
	const base = "counters.redis.capacityLeases"
	if c.TTL != 0 && (c.TTL < MinCapacityLeaseTTL || c.TTL > MaxCapacityLeaseTTL) {
		add(d.ErrorAt(base+".ttl", false, "%v: want between %v and %v", time.Duration(c.TTL), time.Duration(MinCapacityLeaseTTL), time.Duration(MaxCapacityLeaseTTL)))
	}
	if c.Renew < 0 || c.Renew != 0 && c.Renew < MinCapacityLeaseRenew {
		add(d.ErrorAt(base+".renew", false, "%v: want at least %v", time.Duration(c.Renew), time.Duration(MinCapacityLeaseRenew)))
	} else if c.TTL != 0 && c.Renew > c.TTL/2 {
		add(d.ErrorAt(base+".renew", false, "%v: want at most half the ttl (%v)", time.Duration(c.Renew), time.Duration(c.TTL/2)))
	}
	if c.QueuedRenew < 0 || c.QueuedRenew != 0 && c.QueuedRenew < MinCapacityLeaseRenew {
		add(d.ErrorAt(base+".queuedRenew", false, "%v: want at least %v", time.Duration(c.QueuedRenew), time.Duration(MinCapacityLeaseRenew)))
	} else if c.Renew != 0 && c.QueuedRenew > c.Renew {
		add(d.ErrorAt(base+".queuedRenew", false, "%v: want at most renew (%v)", time.Duration(c.QueuedRenew), time.Duration(c.Renew)))
	}
}

// Bounds of counters.redis.leases.ttl: below the minimum a lease serves too
// few requests to save round trips; above the maximum the capacity of a
// gateway that died stays leased for too long.
const (
	MinLeaseTTL = Duration(100 * time.Millisecond)
	MaxLeaseTTL = Duration(time.Minute)
)

func validateLeases(d *Deployment, add func(*Error)) {
	l := d.Counters.Redis.Leases
	const base = "counters.redis.leases"
	switch l.Mode {
	case "", "auto", "off":
	default:
		add(d.ErrorAt(base+".mode", false, "unknown lease mode %q: want auto or off", l.Mode))
	}
	if l.TTL != 0 && (l.TTL < MinLeaseTTL || l.TTL > MaxLeaseTTL) {
		add(d.ErrorAt(base+".ttl", false, "%v: want between %v and %v", time.Duration(l.TTL), time.Duration(MinLeaseTTL), time.Duration(MaxLeaseTTL)))
	}
	for i, e := range l.Exclude {
		field := fmt.Sprintf("%s.exclude[%d]", base, i)
		if e.Route == "" && e.Policy == "" {
			add(d.ErrorAt(field, false, "give a route, a policy or both"))
			continue
		}
		if e.Route != "" && !slices.ContainsFunc(d.Routes, func(r Route) bool { return r.Name == e.Route }) {
			add(d.ErrorAt(field+".route", false, "no route is named %q", e.Route))
			continue
		}
		if e.Policy == "" {
			continue
		}
		used := slices.ContainsFunc(d.Routes, func(r Route) bool {
			return (e.Route == "" || r.Name == e.Route) && slices.ContainsFunc(r.Policies, func(p PolicyEntry) bool { return p.Name == e.Policy })
		})
		switch {
		case used:
		case e.Route != "":
			add(d.ErrorAt(field+".policy", false, "route %q has no policy %q", e.Route, e.Policy))
		default:
			add(d.ErrorAt(field+".policy", false, "no route has a policy %q", e.Policy))
		}
	}
}

// validateProviders returns the type of each provider by name.
func validateProviders(d *Deployment, add func(*Error)) map[string]string {
	types := map[string]string{}
	first := map[string]int{}
	for i, p := range d.Providers {
		base := fmt.Sprintf("providers[%d]", i)
		if p.Name == "" {
			add(d.ErrorAt(base+".name", true, "required"))
		} else if j, dup := first[p.Name]; dup {
			add(d.ErrorAt(base+".name", false, "duplicate provider name %q (first defined at providers[%d])", p.Name, j))
		} else {
			first[p.Name] = i
			types[p.Name] = p.Type
		}
		switch p.Type {
		case "openai", "anthropic":
		case "":
			add(d.ErrorAt(base+".type", true, "required: openai (any OpenAI-compatible API) or anthropic"))
		default:
			add(d.ErrorAt(base+".type", false, "unknown provider type %q: want openai (any OpenAI-compatible API) or anthropic", p.Type))
		}
		switch {
		case p.URL == "" && len(p.Targets) == 0:
			add(d.ErrorAt(base+".url", true, "required: give url, or targets for several upstreams"))
		case p.URL != "" && len(p.Targets) > 0:
			add(d.ErrorAt(base+".targets", true, "give url or targets, not both"))
		}
		if p.URL != "" {
			if msg := UpstreamURLProblem(p.URL); msg != "" {
				add(d.ErrorAt(base+".url", false, "%s", msg))
			}
		}
		for j, t := range p.Targets {
			if msg := UpstreamURLProblem(t); msg != "" {
				add(d.ErrorAt(fmt.Sprintf("%s.targets[%d]", base, j), false, "%s", msg))
			}
		}
		if p.Auth != nil && !headerNameRE.MatchString(p.Auth.Header) {
			if p.Auth.Header == "" {
				add(d.ErrorAt(base+".auth.header", true, "required when auth is given"))
			} else {
				add(d.ErrorAt(base+".auth.header", false, "invalid header name %q", p.Auth.Header))
			}
		}
		if p.Auth != nil {
			switch {
			case p.Auth.Value == "":
				add(d.ErrorAt(base+".auth.value", true, "empty: the provider would get an empty credential (an unset or empty ${VAR}?)"))
			default:
				if msg := HeaderValueProblem(p.Auth.Value); msg != "" {
					add(d.ErrorAt(base+".auth.value", false, "%s", msg))
				}
			}
		}
		for j, h := range p.ForwardHeaders {
			field := fmt.Sprintf("%s.forwardHeaders[%d]", base, j)
			if msg := headerPatternProblem(h); msg != "" {
				add(d.ErrorAt(field, false, "%s", msg))
			} else if why := UnforwardableHeader(h); why != "" {
				add(d.ErrorAt(field, false, "%s is never forwarded: %s", h, why))
			}
		}
		if h := p.ApplicationHeader; h != "" {
			field := base + ".applicationHeader"
			switch {
			case !headerNameRE.MatchString(h) || strings.Contains(h, "*"):
				add(d.ErrorAt(field, false, "invalid header name %q: one field name (no pattern)", h))
			case UnforwardableHeader(h) != "":
				add(d.ErrorAt(field, false, "%s cannot carry the application: %s", h, UnforwardableHeader(h)))
			case p.Auth != nil && strings.EqualFold(p.Auth.Header, h):
				add(d.ErrorAt(field, false, "%s is the provider's auth header", h))
			}
		}
		if p.Timeout < 0 {
			add(d.ErrorAt(base+".timeout", false, "must be positive"))
		}
		if p.Retries != nil && *p.Retries < 0 {
			add(d.ErrorAt(base+".retries", false, "must not be negative"))
		}
	}
	return types
}

// UpstreamURLProblem says what is wrong with s as a provider's url or
// target, or returns "".
func UpstreamURLProblem(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Sprintf("invalid URL %q: %v", s, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Sprintf("want an absolute http:// or https:// URL, got %q", s)
	case u.Host == "":
		return fmt.Sprintf("URL %q has no host", s)
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Sprintf("URL %q must not have a query or fragment", s)
	case u.User != nil:
		return "the URL must not carry credentials: use auth"
	case strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), "/v1"):
		base := *u
		base.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1")
		base.RawPath = ""
		return fmt.Sprintf("the url is the API base without /v1: the route path /v1/... is appended (write %q)", base.String())
	}
	return ""
}

func validateApplications(d *Deployment, add func(*Error)) {
	firstID := map[string]int{}
	keyOwner := map[string]string{}
	for i, a := range d.Applications {
		base := fmt.Sprintf("applications[%d]", i)
		switch {
		case a.ID == "":
			add(d.ErrorAt(base+".id", true, "required"))
		case a.ID == reservedAppID:
			add(d.ErrorAt(base+".id", false, "%q is reserved for requests without an application", a.ID))
		case !appIDRE.MatchString(a.ID):
			add(d.ErrorAt(base+".id", false, "invalid id %q: use letters, digits, '.', '_', '@' and '-', starting with a letter or digit", a.ID))
		default:
			if j, dup := firstID[a.ID]; dup {
				add(d.ErrorAt(base+".id", false, "duplicate application id %q (first defined at applications[%d])", a.ID, j))
			} else {
				firstID[a.ID] = i
			}
		}
		for j, k := range a.APIKeys {
			field := fmt.Sprintf("%s.apiKeys[%d]", base, j)
			if !keyHashRE.MatchString(k) {
				add(d.ErrorAt(field, false, "want \"sha256:\" and 64 lowercase hex digits (`sluice keys hash KEY` prints it); never the key itself"))
				continue
			}
			owner := a.ID
			if owner == "" {
				owner = base
			}
			if prev, dup := keyOwner[k]; dup {
				if prev == owner {
					add(d.ErrorAt(field, false, "key listed twice"))
				} else {
					add(d.ErrorAt(field, false, "key already belongs to application %q: a key identifies one application", prev))
				}
				continue
			}
			keyOwner[k] = owner
		}
		validateKeyObjects(d, base, a, keyOwner, add)
	}
}

func validateRoutes(d *Deployment, providerTypes map[string]string, add func(*Error)) {
	firstName := map[string]int{}
	firstContext := map[string]int{}
	for i, r := range d.Routes {
		base := fmt.Sprintf("routes[%d]", i)
		switch {
		case r.Name == "":
			add(d.ErrorAt(base+".name", true, "required"))
		case !routeNameRE.MatchString(r.Name):
			add(d.ErrorAt(base+".name", false, "invalid route name %q: use letters, digits, '.', '_' and '-', starting with a letter or digit", r.Name))
		default:
			if j, dup := firstName[r.Name]; dup {
				add(d.ErrorAt(base+".name", false, "duplicate route name %q (first defined at routes[%d])", r.Name, j))
			} else {
				firstName[r.Name] = i
			}
		}
		if msg := contextProblem(r.Context); msg != "" {
			add(d.ErrorAt(base+".context", r.Context == "", "%s", msg))
		} else if j, dup := firstContext[r.Context]; dup {
			add(d.ErrorAt(base+".context", false, "duplicate context %q (also routes[%d])", r.Context, j))
		} else {
			firstContext[r.Context] = i
		}
		switch {
		case r.Provider == "":
			add(d.ErrorAt(base+".provider", true, "required"))
		default:
			if _, ok := providerTypes[r.Provider]; !ok {
				add(d.ErrorAt(base+".provider", false, "unknown provider %q (defined: %s)", r.Provider, QuoteList(providerNames(d))))
			}
		}
		for j, p := range r.Policies {
			if p.Name == "" {
				add(d.ErrorAt(fmt.Sprintf("%s.policies[%d].name", base, j), true, "required"))
			}
			validateResources(d, fmt.Sprintf("%s.policies[%d].resources", base, j), p.Resources, add)
		}
		if r.CORS != nil {
			validateCORS(d, base+".cors", r.CORS, add)
		}
	}
}

func validateCORS(d *Deployment, base string, c *CORS, add func(*Error)) {
	if len(c.AllowOrigins) == 0 {
		add(d.ErrorAt(base+".allowOrigins", true, "required: the origins allowed to call the route, or \"*\" for any"))
	}
	for i, o := range c.AllowOrigins {
		if msg := originProblem(o); msg != "" {
			add(d.ErrorAt(fmt.Sprintf("%s.allowOrigins[%d]", base, i), false, "%s", msg))
		}
	}
	for _, list := range []struct {
		name string
		pats []string
	}{{"allowHeaders", c.AllowHeaders}, {"exposeHeaders", c.ExposeHeaders}} {
		for i, h := range list.pats {
			if msg := headerPatternProblem(h); msg != "" {
				add(d.ErrorAt(fmt.Sprintf("%s.%s[%d]", base, list.name, i), false, "%s", msg))
			}
		}
	}
	if c.MaxAge < 0 {
		add(d.ErrorAt(base+".maxAge", false, "must be positive"))
	}
}

// originProblem checks an allowOrigins entry: "*", or scheme://host[:port]
// as a browser sends it in Origin.
func originProblem(o string) string {
	if o == "*" {
		return ""
	}
	u, err := url.Parse(o)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Sprintf("invalid origin %q: want \"*\" or scheme://host[:port], e.g. https://app.example.com", o)
	case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(o, "/"):
		return fmt.Sprintf("invalid origin %q: an origin is scheme://host[:port] without path, query or trailing /", o)
	case strings.Contains(u.Host, "*"):
		return fmt.Sprintf("invalid origin %q: wildcards are not supported; list each origin, or \"*\" for any", o)
	}
	return ""
}

func providerNames(d *Deployment) []string {
	out := make([]string, 0, len(d.Providers))
	for _, p := range d.Providers {
		if p.Name != "" {
			out = append(out, p.Name)
		}
	}
	return out
}

func contextProblem(c string) string {
	switch {
	case c == "":
		return "required: a path prefix like /openai"
	case c == "/":
		return `"/" is not allowed: give each route its own prefix like /openai`
	case !strings.HasPrefix(c, "/"):
		return fmt.Sprintf("context %q must start with /", c)
	case strings.HasSuffix(c, "/"):
		return fmt.Sprintf("context %q must not end with /", c)
	case strings.Contains(c, "//"):
		return fmt.Sprintf("context %q must not contain //", c)
	case strings.ContainsAny(c, "?# \t\n%"):
		return fmt.Sprintf("context %q must be a plain path (no query, fragment, spaces or escapes)", c)
	}
	for _, seg := range strings.Split(c[1:], "/") {
		if seg == "." || seg == ".." {
			return fmt.Sprintf("context %q must not contain . or .. segments", c)
		}
	}
	return ""
}

// QuoteList formats xs for a hint: each quoted, comma separated.
func QuoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(q, ", ")
}
