package config

import (
	"sluice/policies"
)

// validateResources checks an entry's resources attachment at field.
func validateResources(d *Deployment, field string, r *Resources, add func(*Error)) {
	if r == nil {
		return
	}
	switch {
	case len(r.Include) > 0 && len(r.Exclude) > 0:
		add(d.errorAt(field, true, "give include or exclude, not both"))
		return
	case len(r.Include) == 0 && len(r.Exclude) == 0:
		add(d.errorAt(field, true, "give include or exclude with at least one resource (%s), or leave resources out to attach to every resource", quoteList(policies.Resources)))
		return
	}
	list, name := r.Include, "include"
	if len(r.Exclude) > 0 {
		list, name = r.Exclude, "exclude"
	}
	seen := map[string]bool{}
	for i, res := range list {
		f := indexPath(field+"."+name, i)
		switch {
		case !policies.KnownResource(res):
			add(d.errorAt(f, false, "unknown resource %q (known: %s)", res, quoteList(policies.Resources)))
		case seen[res]:
			add(d.errorAt(f, false, "resource %q listed twice", res))
		}
		seen[res] = true
	}
}

// resourceFilter converts an entry's attachment for the chain builder.
func resourceFilter(r *Resources) *policies.ResourceFilter {
	if r == nil {
		return nil
	}
	return &policies.ResourceFilter{Include: r.Include, Exclude: r.Exclude}
}
