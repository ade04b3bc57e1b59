package deployment

import "slices"

// ResourceNames are the resource names of the proxied endpoints: the endpoint
// path without the /v1 prefix. An entry may be attached to some of them only
// (PolicyEntry.Resources), and limit policies may keep one counter per
// resource.
var ResourceNames = []string{"/chat/completions", "/completions", "/embeddings", "/responses", "/messages"}

// KnownResource reports whether r is one of ResourceNames.
func KnownResource(r string) bool { return slices.Contains(ResourceNames, r) }

// validateResources checks an entry's resources attachment at field.
func validateResources(d *Deployment, field string, r *Resources, add func(*Error)) {
	if r == nil {
		return
	}
	switch {
	case len(r.Include) > 0 && len(r.Exclude) > 0:
		add(d.ErrorAt(field, true, "give include or exclude, not both"))
		return
	case len(r.Include) == 0 && len(r.Exclude) == 0:
		add(d.ErrorAt(field, true, "give include or exclude with at least one resource (%s), or leave resources out to attach to every resource", QuoteList(ResourceNames)))
		return
	}
	list, name := r.Include, "include"
	if len(r.Exclude) > 0 {
		list, name = r.Exclude, "exclude"
	}
	seen := map[string]bool{}
	for i, res := range list {
		f := IndexField(field+"."+name, i)
		switch {
		case !KnownResource(res):
			add(d.ErrorAt(f, false, "unknown resource %q (known: %s)", res, QuoteList(ResourceNames)))
		case seen[res]:
			add(d.ErrorAt(f, false, "resource %q listed twice", res))
		}
		seen[res] = true
	}
}
