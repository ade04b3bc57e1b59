package policies

import (
	"strings"

	"sluice/deployment"
)

// ResourceOf is the resource of an upstream path: "/v1/chat/completions"
// and "/v1/chat/completions/" are "/chat/completions". A path outside /v1 is
// its own resource (never one of deployment.ResourceNames).
func ResourceOf(path string) string {
	p := strings.TrimSuffix(path, "/")
	if rest, ok := strings.CutPrefix(p, "/v1/"); ok {
		return "/" + rest
	}
	return p
}

// CallResource is the resource of c's request ("" without a request).
func CallResource(c *Call) string {
	if c == nil || c.Request == nil {
		return ""
	}
	return ResourceOf(c.Request.Path)
}

// ResourceFilter attaches a chain entry to some resources: those in Include,
// or all but those in Exclude. At most one of the two is set; a nil filter
// attaches the entry to every resource.
type ResourceFilter struct {
	Include []string
	Exclude []string
}

// Matches reports whether the filter attaches its entry to resource r.
func (f *ResourceFilter) Matches(r string) bool {
	if f == nil {
		return true
	}
	if len(f.Include) > 0 {
		for _, x := range f.Include {
			if x == r {
				return true
			}
		}
		return false
	}
	for _, x := range f.Exclude {
		if x == r {
			return false
		}
	}
	return true
}

// covers reports whether f attaches its entry to every resource g does (a
// writer filtered by f serves every request a reader filtered by g sees).
func (f *ResourceFilter) covers(g *ResourceFilter) bool {
	if f == nil {
		return true
	}
	for _, r := range deployment.ResourceNames {
		if g.Matches(r) && !f.Matches(r) {
			return false
		}
	}
	// Unknown resources: an exclude filter matches them, an include one never.
	if g == nil || len(g.Exclude) > 0 {
		return len(f.Include) == 0
	}
	return true
}
