// Package modelaccess is the model-access policy: per-application model
// allowlists of exact names and prefixes, checked before the request goes
// upstream.
package modelaccess

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"sluice/gwerror"
	"sluice/policies"
	"sluice/sharedctx"
)

// Name and Version identify the definition.
const (
	Name    = "model-access"
	Version = "v1"
)

// Params configures model-access. A pattern is an exact model name
// ("gpt-4o-mini") or a prefix ending in "*" ("claude-3-5-*"; "*" alone matches
// every model); "*" anywhere else is an error. Names are compared
// case-sensitively. A request for a model the caller may not use is answered
// 403 (code model_not_allowed); so is a request that names no model when a
// restriction applies. With no params every model is allowed.
type Params struct {
	// Models every application may use, unless the application has its own
	// entry in perApplication. Empty or absent: all models.
	Allow []string `json:"allow,omitempty" jsonschema:"uniqueItems=true"`
	// Application id to the models it may use; the list replaces allow for
	// that application. An empty list allows all models. Every id must be an
	// applications[].id of the deployment (a mistyped id is an error, not a
	// restriction that silently never applies); requests without an
	// application follow allow.
	PerApplication map[string][]string `json:"perApplication,omitempty"`
}

// Validate checks every pattern (policies.DecodeParams calls it).
func (p *Params) Validate() error {
	var errs policies.ParamErrors
	check := func(path []string, pats []string) {
		for i, pat := range pats {
			if msg := patternProblem(pat); msg != "" {
				errs = append(errs, &policies.ParamError{
					Path: append(append([]string(nil), path...), strconv.Itoa(i)), Message: msg})
			}
		}
	}
	check([]string{"allow"}, p.Allow)
	apps := make([]string, 0, len(p.PerApplication))
	for app := range p.PerApplication {
		apps = append(apps, app)
	}
	sort.Strings(apps)
	for _, app := range apps {
		if app == "" {
			errs = append(errs, &policies.ParamError{Path: []string{"perApplication"}, Message: "application id must not be empty"})
			continue
		}
		if app == sharedctx.DefaultApplicationID {
			errs = append(errs, &policies.ParamError{Path: []string{"perApplication", app},
				Message: fmt.Sprintf("%q is not an application: requests without an application follow allow", app)})
			continue
		}
		check([]string{"perApplication", app}, p.PerApplication[app])
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// ApplicationRefs names the applications of perApplication, for the
// deployment check.
func (p *Params) ApplicationRefs() []policies.ParamRef {
	refs := make([]policies.ParamRef, 0, len(p.PerApplication))
	for app := range p.PerApplication {
		refs = append(refs, policies.ParamRef{Path: []string{"perApplication", app}, ID: app})
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].ID < refs[j].ID })
	return refs
}

func patternProblem(pat string) string {
	switch {
	case pat == "":
		return "empty model pattern"
	case strings.Contains(pat[:len(pat)-1], "*"):
		return fmt.Sprintf("model pattern %q: \"*\" is only allowed at the end (a prefix match)", pat)
	}
	return ""
}

// Definition returns the model-access v1 definition.
func Definition() policies.Definition {
	d := policies.Define(Name, Version,
		"Restricts which models each application may request: exact names or prefixes, one list for everyone and optional per-application lists.",
		build)
	d.Reads = []policies.MetaKey{{Key: sharedctx.KeyApplicationID, Phase: policies.PhaseRequest, Optional: true}}
	return d
}

// allowlist is a compiled list of patterns: a set of exact names and a list of
// prefixes. all is true when every model is allowed.
type allowlist struct {
	all      bool
	exact    map[string]struct{}
	prefixes []string
}

func compile(pats []string) *allowlist {
	a := &allowlist{exact: make(map[string]struct{}, len(pats))}
	if len(pats) == 0 {
		a.all = true
		return a
	}
	for _, pat := range pats {
		if prefix, ok := strings.CutSuffix(pat, "*"); ok {
			if prefix == "" {
				a.all = true
			}
			a.prefixes = append(a.prefixes, prefix)
			continue
		}
		a.exact[pat] = struct{}{}
	}
	return a
}

func (a *allowlist) allows(model string) bool {
	if a.all {
		return true
	}
	if model == "" {
		return false
	}
	if _, ok := a.exact[model]; ok {
		return true
	}
	for _, p := range a.prefixes {
		if strings.HasPrefix(model, p) {
			return true
		}
	}
	return false
}

// policy is immutable after build and safe for concurrent use.
type policy struct {
	global *allowlist
	perApp map[string]*allowlist
}

func build(p *Params, _ policies.RouteInfo, _ *policies.Services) (policies.Policy, error) {
	pol := &policy{global: compile(p.Allow), perApp: make(map[string]*allowlist, len(p.PerApplication))}
	for app, pats := range p.PerApplication {
		pol.perApp[app] = compile(pats)
	}
	return pol, nil
}

var (
	_ policies.ModelFilter         = (*policy)(nil)
	_ policies.ApplicationReferrer = (*Params)(nil)
)

// listFor is the allowlist of the caller of c.
func (p *policy) listFor(c *policies.Call) *allowlist {
	if app := c.Shared.ApplicationID(); app != "" {
		if l, ok := p.perApp[app]; ok {
			return l
		}
	}
	return p.global
}

// AllowsModel reports whether the caller of c may use model: the check of
// OnRequest, for GET /v1/models.
func (p *policy) AllowsModel(c *policies.Call, model string) bool {
	return p.listFor(c).allows(model)
}

// OnRequest admits the request when its model is on the caller's allowlist.
// A request that names no model is denied whenever a restriction applies.
func (p *policy) OnRequest(c *policies.Call) *gwerror.Error {
	app := c.Shared.ApplicationID()
	list := p.listFor(c)
	model := c.Shared.ServedModel()
	if list.allows(model) {
		return nil
	}
	var msg string
	switch {
	case model == "":
		msg = "the request names no model, and this application may only use specific models"
	case app == "":
		msg = fmt.Sprintf("model %q is not allowed on this route", model)
	default:
		msg = fmt.Sprintf("model %q is not allowed for application %q", model, app)
	}
	e := gwerror.New(http.StatusForbidden, gwerror.TypePermission, gwerror.CodeModelNotAllowed, msg)
	e.Param = "model"
	return e
}
