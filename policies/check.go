package policies

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"time"

	"sluice/admission"
	"sluice/admission/admissionconfig"
	"sluice/counter"
	"sluice/deployment"
	"sluice/pricing"
	"sluice/sharedctx"
	"sluice/tokencount"
)

// GatewayProvided is the metadata the gateway itself writes for policies:
// the normalised usage, before the response phase. Every chain is built
// against it (BuildRoute), the served ones and the checked ones alike.
var GatewayProvided = []MetaKey{{Key: sharedctx.KeyLLMUsage, Phase: PhaseResponse}}

// BuildRoute builds the chain of d.Routes[route] with svc: the one way from
// a deployment route to a chain, for the gateway (its services) and for
// Check (stand-ins). Every entry's params are decoded first, so that every
// bad entry is reported, not only the first, and application ids named in
// params must be defined in d (ApplicationReferrer). Problems are
// deployment.Errors positioned in d's source; then no chain is returned. A
// route without policies gets an empty chain. d should have passed
// deployment.Validate (yamlfile does that).
func (r *Registry) BuildRoute(d *deployment.Deployment, route int, svc *Services) (*Chain, error) {
	rt := &d.Routes[route]
	specs := make([]EntrySpec, len(rt.Policies))
	for j, p := range rt.Policies {
		specs[j] = EntrySpec{Name: p.Name, Version: p.Version, Params: p.Params, Resources: resourceFilter(p.Resources)}
	}
	info := RouteInfo{
		RouteName: rt.Name, APIName: rt.Name,
		Provider: rt.Provider, ProviderType: providerType(d, rt.Provider),
		Attachment: "route",
	}
	// BuildChain stops at the first bad entry; decoding every entry's
	// params first (pure, nothing is constructed) reports them all.
	pre, decoded := r.precheck(info, specs)
	errs := applicationRefErrors(d, route, decoded)
	for _, e := range pre {
		errs = append(errs, r.positioned(d, route, e)...)
	}
	if len(errs) > 0 {
		return nil, errs.Normalize()
	}
	ch, err := r.BuildChain(info, specs, svc, GatewayProvided)
	if err != nil {
		return nil, r.positioned(d, route, err).Normalize()
	}
	return ch, nil
}

// providerType is the type of the first provider of d named name.
func providerType(d *deployment.Deployment, name string) string {
	for _, p := range d.Providers {
		if p.Name == name {
			return p.Type
		}
	}
	return ""
}

// resourceFilter converts an entry's attachment for the chain builder.
func resourceFilter(r *deployment.Resources) *ResourceFilter {
	if r == nil {
		return nil
	}
	return &ResourceFilter{Include: r.Include, Exclude: r.Exclude}
}

// precheck resolves every entry's definition and decodes its params, without
// constructing anything, and returns the problems of all entries and the
// decoded params by entry (nil where they did not decode).
func (r *Registry) precheck(info RouteInfo, specs []EntrySpec) ([]*EntryError, []any) {
	var out []*EntryError
	decoded := make([]any, len(specs))
	for i, s := range specs {
		if s.Name == "" {
			continue // deployment.Validate reports it
		}
		version := s.Version
		if version == "" {
			version = deployment.DefaultPolicyVersion
		}
		def, ok := r.Lookup(s.Name, version)
		if !ok {
			// An unknown name or version fails before construction; let
			// BuildChain phrase it.
			_, err := r.BuildChain(info, []EntrySpec{s}, nil, nil)
			var ee *EntryError
			if errors.As(err, &ee) {
				e := *ee
				e.Index = i
				out = append(out, &e)
			}
			continue
		}
		params, err := r.DecodeParams(def, s.Params)
		if err != nil {
			var pe ParamErrors
			if errors.As(err, &pe) {
				out = append(out, &EntryError{Index: i, Field: "params", Params: pe})
			} else {
				out = append(out, &EntryError{Index: i, Field: "params", Message: err.Error()})
			}
			continue
		}
		decoded[i] = params
	}
	return out, decoded
}

// applicationRefErrors reports, for route, every application id named by a
// params struct (ApplicationReferrer) that d does not define, at the param's
// position.
func applicationRefErrors(d *deployment.Deployment, route int, decoded []any) deployment.Errors {
	var out deployment.Errors
	var apps map[string]bool
	for j, params := range decoded {
		ar, ok := params.(ApplicationReferrer)
		if !ok {
			continue
		}
		if apps == nil {
			apps = applicationIDs(d)
		}
		entry := d.Routes[route].Policies[j]
		for _, ref := range ar.ApplicationRefs() {
			if apps[ref.ID] || ref.ID == sharedctx.DefaultApplicationID || ref.ID == "" {
				continue // "" is the policy's own Validate error
			}
			field := paramPath(fmt.Sprintf("routes[%d].policies[%d].params", route, j), entry.Params, ref.Path)
			out = append(out, d.ErrorAt(field, true, "application %q is not defined in applications (%s): the entry would never apply",
				ref.ID, definedApplications(d)))
		}
	}
	return out
}

// applicationIDs is the set of application ids d defines.
func applicationIDs(d *deployment.Deployment) map[string]bool {
	ids := make(map[string]bool, len(d.Applications))
	for _, a := range d.Applications {
		if a.ID != "" {
			ids[a.ID] = true
		}
	}
	return ids
}

// definedApplications lists d's application ids for an error hint, the first
// few only.
func definedApplications(d *deployment.Deployment) string {
	const most = 8
	var ids []string
	for _, a := range d.Applications {
		if a.ID != "" {
			ids = append(ids, a.ID)
		}
	}
	switch {
	case len(ids) == 0:
		return "none is defined"
	case len(ids) > most:
		return "defined: " + deployment.QuoteList(ids[:most]) + fmt.Sprintf(" and %d more", len(ids)-most)
	}
	return "defined: " + deployment.QuoteList(ids)
}

// positioned maps BuildChain's error for route to positioned
// deployment.Errors.
func (r *Registry) positioned(d *deployment.Deployment, route int, err error) deployment.Errors {
	var ee *EntryError
	if !errors.As(err, &ee) {
		return deployment.Errors{d.ErrorAt(fmt.Sprintf("routes[%d].policies", route), false, "%v", err)}
	}
	base := fmt.Sprintf("routes[%d].policies[%d]", route, ee.Index)
	var entry deployment.PolicyEntry
	if ee.Index >= 0 && ee.Index < len(d.Routes[route].Policies) {
		entry = d.Routes[route].Policies[ee.Index]
	}
	if len(ee.Params) == 0 {
		field := base
		if ee.Field != "" {
			field = base + "." + ee.Field
		}
		return deployment.Errors{d.ErrorAt(field, false, "%s", ee.Message)}
	}
	out := make(deployment.Errors, 0, len(ee.Params))
	for _, pe := range ee.Params {
		field := paramPath(base+".params", entry.Params, pe.Path)
		switch pe.Kind {
		case UnknownParam:
			out = append(out, d.ErrorAt(field, true, "unknown parameter of %s (known: %s)", entry.Name, r.paramNames(entry)))
		case MissingParam:
			out = append(out, d.ErrorAt(field, true, "required parameter of %s", entry.Name))
		default:
			out = append(out, d.ErrorAt(field, false, "%s", pe.Message))
		}
	}
	return out
}

// paramPath joins a ParamError path under base, the field path of params:
// a numeric segment is a list index unless params hold a mapping there (a
// numeric mapping key).
func paramPath(base string, params map[string]any, segs []string) string {
	p := base
	var v any = params
	for _, s := range segs {
		m, isMap := v.(map[string]any)
		if _, err := strconv.Atoi(s); err == nil && !isMap {
			p = p + "[" + s + "]"
			if l, ok := v.([]any); ok {
				i, _ := strconv.Atoi(s)
				v = nil
				if i >= 0 && i < len(l) {
					v = l[i]
				}
			} else {
				v = nil
			}
			continue
		}
		p = deployment.ChildField(p, s)
		v = m[s] // nil when v is not a mapping
	}
	return p
}

// paramNames lists a policy's params by their JSON names, for hints.
func (r *Registry) paramNames(entry deployment.PolicyEntry) string {
	def, ok := r.Lookup(entry.Name, entry.Version)
	if !ok {
		return "none"
	}
	t := reflect.TypeOf(def.NewParams()).Elem()
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// Checker builds deployments' chains without serving them, for `sluice
// validate` and the platform (every write of a provider, a limit or a
// guardrail), with StandInServices built once. Safe for concurrent use.
type Checker struct {
	reg *Registry
	svc *Services
}

// NewChecker returns a Checker for reg.
func NewChecker(reg *Registry) *Checker { return &Checker{reg: reg, svc: StandInServices()} }

// StandInServices are services good enough to construct any policy, not to
// serve: a silent logger, the clock, the embedded price catalog (so a
// policy's pricingFile is still checked against it), the tokenizer, a key
// index with no keys, a counter store that reports itself unavailable and a
// scheduler that is never configured; construction reaches none of them. So a constructor's complaint about a missing
// service is never reported as a problem of the document, while
// construction-time checks of params still are. Nothing is registered for
// metrics.
func StandInServices() *Services {
	cat, err := pricing.New("")
	if err != nil {
		// The embedded table is tested to load; without it, prices are
		// simply unknown to the check.
		cat = &pricing.Catalog{}
	}
	sched, err := admission.New(admission.Config{}, admission.Options{})
	if err != nil {
		panic(err) // the empty configuration is valid
	}
	return &Services{
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:       time.Now,
		Keys:      noKeys{},
		Counters:  unavailableStore{},
		Pricing:   cat,
		Tokens:    tokencount.New(),
		Admission: sched,
	}
}

// Check validates d's structure (deployment.Validate), builds every
// route's chain and translates the fair-admission fields, reporting every
// problem as deployment.Errors in file order.
func Check(d *deployment.Deployment, reg *Registry) error { return NewChecker(reg).Check(d) }

// Check is the package's Check with c's stand-in services.
func (c *Checker) Check(d *deployment.Deployment) error {
	var errs deployment.Errors
	if err := deployment.Validate(d); err != nil {
		var es deployment.Errors
		if !errors.As(err, &es) {
			return err
		}
		errs = es
	}
	if err := c.CheckChains(d); err != nil {
		var es deployment.Errors
		if !errors.As(err, &es) {
			return err
		}
		errs = append(errs, es...)
	}
	return errs.Normalize().Err()
}

// CheckChains builds every route's chain of d and translates its
// fair-admission fields (admissionconfig), as the gateway does when it
// applies d, without the structural validation (for a document that
// yamlfile read, which validated it): problems are deployment.Errors in
// file order. The chains built end their life at once (Chain.Close; an
// error closing them is not the document's and goes to the services'
// logger).
func (c *Checker) CheckChains(d *deployment.Deployment) error {
	var errs deployment.Errors
	if _, err := admissionconfig.FromDeployment(d); err != nil {
		var es deployment.Errors
		if !errors.As(err, &es) {
			return err
		}
		errs = append(errs, es...)
	}
	for i := range d.Routes {
		ch, err := c.reg.BuildRoute(d, i, c.svc)
		if err == nil {
			if cerr := ch.Close(); cerr != nil && c.svc.Logger != nil {
				c.svc.Logger.Warn("closing the instances of a checked chain", "route", d.Routes[i].Name, "error", cerr)
			}
			continue
		}
		var es deployment.Errors
		if !errors.As(err, &es) {
			return err
		}
		errs = append(errs, es...)
	}
	return errs.Normalize().Err()
}

// noKeys is the stand-in key index: it knows no key.
type noKeys struct{}

func (noKeys) Lookup([32]byte) (Credential, bool) { return Credential{}, false }

// unavailableStore is the stand-in counter store: never called during
// construction, it reports itself unavailable if it were.
type unavailableStore struct{}

func (unavailableStore) Reserve(context.Context, []counter.Debit, *counter.Result) error {
	return counter.ErrUnavailable
}
func (unavailableStore) Adjust(context.Context, []counter.Debit, *counter.Ticket, []int64) error {
	return counter.ErrUnavailable
}
func (unavailableStore) Peek(context.Context, []counter.Debit, *counter.Result) error {
	return counter.ErrUnavailable
}
func (unavailableStore) Close() error { return nil }
