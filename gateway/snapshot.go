package gateway

import (
	"errors"
	"fmt"
	"net/textproto"
	"net/url"
	"sort"
	"strings"
	"time"

	"sluice/admission"
	"sluice/admission/admissionconfig"
	"sluice/deployment"
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
	// admission is the scheduler configuration of the deployment, applied
	// to Services.Admission before the snapshot is swapped in.
	admission admission.Config
	// life counts the snapshot's references (lifecycle.go).
	life lifetime
}

type route struct {
	name string
	// context is the route's path prefix as validated: a leading "/", no
	// trailing "/".
	context  string
	provider *provider
	chain    *policies.Chain
	// cors is nil when the route sets no cors.
	cors *corsPolicy
	// series caches the route's request metrics (metrics.go).
	series routeSeries
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
	// appHeader is the canonical name of the header that carries the
	// caller's application id upstream ("": none).
	appHeader string
}

// buildSnapshot builds a snapshot of d, which passed deployment.Validate: it
// does not check again what Validate checked.
func (g *Gateway) buildSnapshot(d *deployment.Deployment) (*snapshot, error) {
	if d == nil {
		return nil, fmt.Errorf("gateway: nil deployment")
	}
	deployment.ApplyDefaults(d)
	s := &snapshot{
		maxRequestBytes:   d.Server.MaxRequestBytes,
		shutdownGrace:     d.Server.ShutdownGrace.D(),
		readHeaderTimeout: d.Server.ReadHeaderTimeout.D(),
		readTimeout:       d.Server.ReadTimeout.D(),
		writeTimeout:      d.Server.WriteTimeout.D(),
		metricsToken:      d.Server.MetricsToken,
	}
	providers := make(map[string]*provider, len(d.Providers))
	for i := range d.Providers {
		p, err := buildProvider(&d.Providers[i])
		if err != nil {
			return nil, err
		}
		providers[p.name] = p
	}
	svc := g.opts.Services
	keys, err := g.opts.KeyIndex(d)
	if err != nil {
		return nil, err
	}
	svc.Keys = keys
	// The admission section's problems and the chains' are reported together.
	var errs deployment.Errors
	s.admission, err = admissionconfig.FromDeployment(d)
	if err != nil && !errors.As(err, &errs) {
		return nil, err
	}
	chains, err := buildChains(d, g.opts.Registry, &svc)
	if err != nil {
		var es deployment.Errors
		if !errors.As(err, &es) {
			return nil, err
		}
		errs = append(errs, es...)
	}
	if len(errs) > 0 {
		return nil, errs.Normalize()
	}
	for i := range d.Routes {
		rc := &d.Routes[i]
		s.routes = append(s.routes, &route{name: rc.Name, context: rc.Context, provider: providers[rc.Provider],
			chain: chains[rc.Name], cors: newCORS(rc.CORS)})
	}
	sort.SliceStable(s.routes, func(i, j int) bool { return len(s.routes[i].context) > len(s.routes[j].context) })
	return s, nil
}

func buildProvider(pc *deployment.Provider) (*provider, error) {
	p := &provider{
		name:    pc.Name,
		typ:     pc.Type,
		timeout: pc.Timeout.D(),
		retries: *pc.Retries,
	}
	p.forward = forwardSet(p.typ, pc.ForwardHeaders)
	if pc.ApplicationHeader != "" {
		p.appHeader = textproto.CanonicalMIMEHeaderKey(pc.ApplicationHeader)
	}
	if pc.Auth != nil {
		p.authHeader, p.authValue = pc.Auth.Header, pc.Auth.Value
	}
	raw := pc.Targets
	if len(raw) == 0 {
		raw = []string{pc.URL}
	}
	for _, t := range raw {
		u, err := url.Parse(t)
		if err != nil {
			return nil, fmt.Errorf("provider %q: target %q: %w", pc.Name, t, err)
		}
		u.Path = strings.TrimSuffix(u.Path, "/")
		p.targets = append(p.targets, u)
		p.targetKeys = append(p.targetKeys, u.Scheme+"://"+u.Host)
	}
	return p, nil
}

// match returns the route whose context is the longest prefix of path (on a
// segment boundary) and the rest of the path.
func (s *snapshot) match(path string) (*route, string) {
	for _, r := range s.routes {
		if strings.HasPrefix(path, r.context) {
			rest := path[len(r.context):]
			if rest == "" || rest[0] == '/' {
				return r, rest
			}
		}
	}
	return nil, ""
}
