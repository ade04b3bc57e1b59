package gateway

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"sluice/gateway/config"
	"sluice/policies"
)

// snapshot is one applied deployment. It is immutable once stored.
type snapshot struct {
	// routes are sorted by context length, longest first, so the first match
	// is the longest matching prefix.
	routes          []*route
	maxRequestBytes int64
	shutdownGrace   time.Duration
	// readHeaderTimeout is only read by Serve (http.Server cannot change it
	// while serving); readTimeout bounds reading a request body, writeTimeout
	// each write to a client.
	readHeaderTimeout time.Duration
	readTimeout       time.Duration
	writeTimeout      time.Duration
	// metricsToken, when set, is the bearer token /metrics requires.
	metricsToken string
	// life counts the snapshot's references (lifecycle.go).
	life lifetime
}

type route struct {
	name     string
	context  string // normalised: leading "/", no trailing "/"; "" for the root
	provider *provider
	chain    *policies.Chain
	// cors is nil when the route sets no cors.
	cors *corsPolicy
}

type provider struct {
	name       string
	typ        string
	targets    []*url.URL
	targetKeys []string // metric label per target (scheme://host)
	authHeader string
	authValue  string
	timeout    time.Duration
	retries    int
	// forward is the set of client headers sent upstream.
	forward headerSet
}

func (g *Gateway) buildSnapshot(d *config.Deployment) (*snapshot, error) {
	if d == nil {
		return nil, fmt.Errorf("gateway: nil deployment")
	}
	s := &snapshot{
		maxRequestBytes:   d.Server.MaxRequestBytes,
		shutdownGrace:     orDefault(d.Server.ShutdownGrace.D(), DefaultShutdownGrace),
		readHeaderTimeout: orDefault(d.Server.ReadHeaderTimeout.D(), DefaultReadHeaderTimeout),
		readTimeout:       orDefault(d.Server.ReadTimeout.D(), DefaultReadTimeout),
		writeTimeout:      orDefault(d.Server.WriteTimeout.D(), DefaultWriteTimeout),
		metricsToken:      d.Server.MetricsToken,
	}
	if s.maxRequestBytes <= 0 {
		s.maxRequestBytes = DefaultMaxRequestBytes
	}
	providers := make(map[string]*provider, len(d.Providers))
	for i := range d.Providers {
		p, err := buildProvider(&d.Providers[i])
		if err != nil {
			return nil, err
		}
		if _, dup := providers[p.name]; dup {
			return nil, fmt.Errorf("providers[%d]: duplicate provider name %q", i, p.name)
		}
		providers[p.name] = p
	}
	svc := g.opts.Services
	keys, err := g.opts.KeyIndex(d)
	if err != nil {
		return nil, err
	}
	svc.Keys = keys
	chains, err := g.opts.BuildChains(d, g.opts.Registry, &svc)
	if err != nil {
		return nil, err
	}
	seenCtx := map[string]string{}
	for i := range d.Routes {
		rc := &d.Routes[i]
		p, ok := providers[rc.Provider]
		if !ok {
			return nil, fmt.Errorf("routes[%d] (%s): unknown provider %q", i, rc.Name, rc.Provider)
		}
		ctx := normContext(rc.Context)
		if other, dup := seenCtx[ctx]; dup {
			return nil, fmt.Errorf("routes[%d] (%s): context %q is already used by route %q", i, rc.Name, rc.Context, other)
		}
		seenCtx[ctx] = rc.Name
		ch := chains[rc.Name]
		if ch == nil {
			// A route without policies still gets a (empty) chain.
			ch, err = g.opts.Registry.BuildChain(routeInfo(rc, p), nil, &svc, config.GatewayProvided)
			if err != nil {
				return nil, err
			}
		}
		s.routes = append(s.routes, &route{name: rc.Name, context: ctx, provider: p, chain: ch, cors: newCORS(rc.CORS)})
	}
	sort.SliceStable(s.routes, func(i, j int) bool { return len(s.routes[i].context) > len(s.routes[j].context) })
	return s, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func routeInfo(rc *config.Route, p *provider) policies.RouteInfo {
	return policies.RouteInfo{
		RouteName:    rc.Name,
		APIName:      rc.Name,
		Provider:     p.name,
		ProviderType: p.typ,
		Attachment:   "route",
	}
}

func providerType(t string) string {
	switch strings.ToLower(t) {
	case "anthropic":
		return "anthropic"
	default:
		return "openai"
	}
}

func buildProvider(pc *config.Provider) (*provider, error) {
	p := &provider{
		name:    pc.Name,
		typ:     providerType(pc.Type),
		timeout: time.Duration(pc.Timeout),
		retries: DefaultRetries,
	}
	p.forward = forwardSet(p.typ, pc.ForwardHeaders)
	if p.timeout <= 0 {
		p.timeout = DefaultUpstreamTimeout
	}
	if pc.Retries != nil {
		if *pc.Retries < 0 {
			return nil, fmt.Errorf("provider %q: retries must not be negative", pc.Name)
		}
		p.retries = *pc.Retries
	}
	if pc.Auth != nil && pc.Auth.Header != "" {
		p.authHeader, p.authValue = pc.Auth.Header, pc.Auth.Value
	}
	raw := pc.Targets
	if len(raw) == 0 && pc.URL != "" {
		raw = []string{pc.URL}
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("provider %q: url or targets is required", pc.Name)
	}
	for _, t := range raw {
		u, err := url.Parse(strings.TrimSpace(t))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("provider %q: target %q is not an http(s) URL", pc.Name, t)
		}
		u.Path = strings.TrimSuffix(u.Path, "/")
		p.targets = append(p.targets, u)
		p.targetKeys = append(p.targetKeys, u.Scheme+"://"+u.Host)
	}
	return p, nil
}

func normContext(c string) string {
	c = strings.TrimSpace(c)
	c = strings.TrimRight(c, "/")
	if c != "" && !strings.HasPrefix(c, "/") {
		c = "/" + c
	}
	return c
}

// match returns the route whose context is the longest prefix of path (on a
// segment boundary) and the rest of the path.
func (s *snapshot) match(path string) (*route, string) {
	for _, r := range s.routes {
		if r.context == "" {
			return r, path
		}
		if strings.HasPrefix(path, r.context) {
			rest := path[len(r.context):]
			if rest == "" || rest[0] == '/' {
				return r, rest
			}
		}
	}
	return nil, ""
}
