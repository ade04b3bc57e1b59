package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"sluice/counter"
	"sluice/policies"
	"sluice/pricing"
	"sluice/sharedctx"
	"sluice/tokencount"
)

// GatewayProvided is the metadata the gateway itself writes for policies:
// the normalised usage, before the response phase. Read-only.
var GatewayProvided = []policies.MetaKey{{Key: sharedctx.KeyLLMUsage, Phase: policies.PhaseResponse}}

// BuildChains builds every route's policy chain with reg and svc, keyed by
// route name. Every route is tried; problems are returned together as Errors
// positioned in d's file, and then no chains are returned. d should have
// passed Validate (Load does that).
func BuildChains(d *Deployment, reg *policies.Registry, svc *policies.Services) (map[string]*policies.Chain, error) {
	types := map[string]string{}
	for _, p := range d.Providers {
		if _, dup := types[p.Name]; !dup {
			types[p.Name] = p.Type
		}
	}
	chains := make(map[string]*policies.Chain, len(d.Routes))
	apps := applicationIDs(d)
	var errs Errors
	for i, r := range d.Routes {
		specs := make([]policies.EntrySpec, len(r.Policies))
		for j, p := range r.Policies {
			specs[j] = policies.EntrySpec{Name: p.Name, Version: p.Version, Params: p.Params, Resources: resourceFilter(p.Resources)}
		}
		info := policies.RouteInfo{
			RouteName: r.Name, APIName: r.Name,
			Provider: r.Provider, ProviderType: types[r.Provider],
			Attachment: "route",
		}
		// BuildChain stops at the first bad entry; decoding every entry's
		// params first (pure, nothing is constructed) reports them all.
		pre, decoded := precheck(reg, info, specs)
		refs := d.applicationRefErrors(i, decoded, apps)
		if len(pre) > 0 || len(refs) > 0 {
			for _, e := range pre {
				errs = append(errs, d.chainErrors(reg, i, e)...)
			}
			errs = append(errs, refs...)
			continue
		}
		ch, err := reg.BuildChain(info, specs, svc, GatewayProvided)
		if err != nil {
			errs = append(errs, d.chainErrors(reg, i, err)...)
			continue
		}
		chains[r.Name] = ch
	}
	if len(errs) > 0 {
		return nil, errs.normalize()
	}
	return chains, nil
}

// precheck resolves every entry's definition and decodes its params, without
// constructing anything, and returns the problems of all entries and the
// decoded params by entry (nil where they did not decode).
func precheck(reg *policies.Registry, info policies.RouteInfo, specs []policies.EntrySpec) ([]*policies.EntryError, []any) {
	var out []*policies.EntryError
	decoded := make([]any, len(specs))
	for i, s := range specs {
		if s.Name == "" {
			continue // Validate reports it
		}
		version := s.Version
		if version == "" {
			version = DefaultPolicyVersion
		}
		def, ok := reg.Lookup(s.Name, version)
		if !ok {
			// An unknown name or version fails before construction; let the
			// registry phrase it.
			_, err := reg.BuildChain(info, []policies.EntrySpec{s}, nil, nil)
			var ee *policies.EntryError
			if errors.As(err, &ee) {
				e := *ee
				e.Index = i
				out = append(out, &e)
			}
			continue
		}
		params, err := reg.DecodeParams(def, s.Params)
		if err != nil {
			var pe policies.ParamErrors
			if errors.As(err, &pe) {
				out = append(out, &policies.EntryError{Index: i, Field: "params", Params: pe})
			} else {
				out = append(out, &policies.EntryError{Index: i, Field: "params", Message: err.Error()})
			}
			continue
		}
		decoded[i] = params
	}
	return out, decoded
}

// applicationIDs is the set of application ids d defines.
func applicationIDs(d *Deployment) map[string]bool {
	ids := make(map[string]bool, len(d.Applications))
	for _, a := range d.Applications {
		if a.ID != "" {
			ids[a.ID] = true
		}
	}
	return ids
}

// applicationRefErrors reports, for route i, every application id named by
// a params struct (policies.ApplicationReferrer) that apps does not define,
// at the param's position.
func (d *Deployment) applicationRefErrors(route int, decoded []any, apps map[string]bool) Errors {
	var out Errors
	for j, params := range decoded {
		ar, ok := params.(policies.ApplicationReferrer)
		if !ok {
			continue
		}
		for _, ref := range ar.ApplicationRefs() {
			if apps[ref.ID] || ref.ID == sharedctx.DefaultApplicationID || ref.ID == "" {
				continue // "" is the policy's own Validate error
			}
			field := d.paramPath(fmt.Sprintf("routes[%d].policies[%d].params", route, j), ref.Path)
			out = append(out, d.errorAt(field, true, "application %q is not defined in applications (%s): the entry would never apply",
				ref.ID, definedApplications(d)))
		}
	}
	return out
}

// definedApplications lists d's application ids for an error hint, the first
// few only.
func definedApplications(d *Deployment) string {
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
		return "defined: " + quoteList(ids[:most]) + fmt.Sprintf(" and %d more", len(ids)-most)
	}
	return "defined: " + quoteList(ids)
}

// Check validates d and builds its chains against reg without serving them,
// for `sluice validate` and the platform. Policies are constructed with
// stand-in services (see checkServices), so a constructor's complaint about a
// missing service is never reported as a problem of the document, while
// construction-time checks of params still are.
func Check(d *Deployment, reg *policies.Registry) error {
	errs := validate(d)
	if _, err := BuildChains(d, reg, checkServices(d)); err != nil {
		var ce Errors
		if errors.As(err, &ce) {
			errs = append(errs, ce...)
		} else {
			errs = append(errs, &Error{File: d.Source, Message: err.Error()})
		}
	}
	return errs.normalize().errOrNil()
}

// checkServices are services good enough to construct any policy: the
// deployment's own key index, a clock, a silent logger, the embedded price
// catalog (so a policy's pricingFile is still checked against it), the
// tokenizer, and a counter store that is never called during construction
// (it reports itself unavailable if it were). Nothing is registered for
// metrics.
func checkServices(d *Deployment) *policies.Services {
	cat, err := pricing.New("")
	if err != nil {
		cat = &pricing.Catalog{}
	}
	return &policies.Services{
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:      time.Now,
		Keys:     NewKeyIndex(d),
		Counters: unavailableStore{},
		Pricing:  cat,
		Tokens:   tokencount.New(),
	}
}

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

// chainErrors maps BuildChain's error for route i to positioned Errors.
func (d *Deployment) chainErrors(reg *policies.Registry, route int, err error) Errors {
	var ee *policies.EntryError
	if !errors.As(err, &ee) {
		return Errors{d.errorAt(fmt.Sprintf("routes[%d].policies", route), false, "%v", err)}
	}
	base := fmt.Sprintf("routes[%d].policies[%d]", route, ee.Index)
	var entry PolicyEntry
	if ee.Index >= 0 && ee.Index < len(d.Routes[route].Policies) {
		entry = d.Routes[route].Policies[ee.Index]
	}
	if len(ee.Params) == 0 {
		field := base
		if ee.Field != "" {
			field = base + "." + ee.Field
		}
		return Errors{d.errorAt(field, false, "%s", ee.Message)}
	}
	var out Errors
	for _, pe := range ee.Params {
		// The schema validator also reports each failing container as
		// "validation failed"; the leaf problems say more.
		if pe.Message == "validation failed" && len(ee.Params) > 1 {
			continue
		}
		out = append(out, d.paramErrors(reg, entry, base+".params", pe)...)
	}
	return out
}

var (
	additionalRE = regexp.MustCompile(`^additional propert(?:y|ies) (.+) not allowed$`)
	missingRE    = regexp.MustCompile(`^missing propert(?:y|ies) (.+)$`)
	quotedRE     = regexp.MustCompile(`'((?:[^'\\]|\\.)*)'`)
)

// paramErrors positions one params problem. Unknown and missing params are
// split per name and reported at the key; other problems at the value.
func (d *Deployment) paramErrors(reg *policies.Registry, entry PolicyEntry, paramsPath string, pe *policies.ParamError) Errors {
	field := d.paramPath(paramsPath, pe.Path)
	if m := additionalRE.FindStringSubmatch(pe.Message); m != nil {
		known := paramNames(reg, entry)
		var out Errors
		for _, name := range quotedNames(m[1]) {
			out = append(out, d.errorAt(childPath(field, name), true, "unknown parameter %q of %s (known: %s)", name, entry.Name, known))
		}
		return out
	}
	if m := missingRE.FindStringSubmatch(pe.Message); m != nil {
		var out Errors
		for _, name := range quotedNames(m[1]) {
			out = append(out, d.errorAt(childPath(field, name), true, "required parameter of %s", entry.Name))
		}
		return out
	}
	msg := pe.Message
	if pe.Message == "unknown parameter" {
		return Errors{d.errorAt(field, true, "unknown parameter of %s (known: %s)", entry.Name, paramNames(reg, entry))}
	}
	if strings.Contains(msg, "does not match pattern") && strings.Contains(msg, "(ns|us|µs|ms|s|m|h)") {
		// A duration string rejected by the schema: say why in words.
		if s, ok := lookupParam(entry.Params, pe.Path).(string); ok {
			if _, err := policies.ParseDuration(s); err != nil {
				msg = err.Error()
			}
		}
	}
	return Errors{d.errorAt(field, false, "%s", msg)}
}

// paramPath joins a ParamError path under paramsPath: numeric segments are
// list indexes unless the file has a mapping key of that name there.
func (d *Deployment) paramPath(paramsPath string, segs []string) string {
	p := paramsPath
	for _, s := range segs {
		if _, err := strconv.Atoi(s); err == nil {
			if d.has(indexPath(p, 0)) || !d.has(childPath(p, s)) {
				p = p + "[" + s + "]"
				continue
			}
		}
		p = childPath(p, s)
	}
	return p
}

func quotedNames(s string) []string {
	var out []string
	for _, m := range quotedRE.FindAllStringSubmatch(s, -1) {
		out = append(out, strings.ReplaceAll(m[1], `\'`, `'`))
	}
	return out
}

// paramNames lists a policy's params by their JSON names, for hints.
func paramNames(reg *policies.Registry, entry PolicyEntry) string {
	def, ok := reg.Lookup(entry.Name, entry.Version)
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

func lookupParam(v any, path []string) any {
	for _, s := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[s]
		case []any:
			i, err := strconv.Atoi(s)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}
