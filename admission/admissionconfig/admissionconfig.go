// Package admissionconfig translates the deployment document's fair-admission
// fields (the admission section, providers[].capacity and
// applications[].admission) into the scheduler's admission.Config, and
// reports every problem of them at its field path in the document.
//
// It is the only package of the admission tree (tests aside) that reads the
// deployment's types: the scheduler takes its own Config and knows nothing of
// the document. The gateway translates every deployment it applies with it,
// and the dry-run check (policies.Check: `sluice validate`, the platform)
// reports the same problems.
package admissionconfig

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"sluice/admission"
	"sluice/deployment"
)

// classNameRE is a class name: it is a metric label value and a segment of
// field paths, so it has no '.' and no spaces.
var classNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

// FromDeployment returns the scheduler configuration of d: one target per
// provider with a capacity (named by the provider), the section's weights
// and classes, and each application's weight and granted class. Problems
// are deployment.Errors at their field paths, in file order; then the
// Config is not usable. d should have passed deployment.Validate.
func FromDeployment(d *deployment.Deployment) (admission.Config, error) {
	var errs deployment.Errors
	cfg := admission.Config{
		Targets:    map[string]admission.Capacity{},
		Classes:    map[string]admission.Class{},
		Weights:    map[string]float64{},
		AppClasses: map[string]string{},
	}
	// paths maps the scheduler's field paths back to the document's.
	paths := []pathMap{
		{"inputWeight", "admission.inputWeight"},
		{"outputWeight", "admission.outputWeight"},
		{"classes", "admission.classes"},
	}
	for i, p := range d.Providers {
		if p.Capacity == nil || p.Name == "" {
			continue
		}
		if _, dup := cfg.Targets[p.Name]; dup {
			continue // deployment.Validate reports the duplicate name
		}
		cfg.Targets[p.Name] = admission.Capacity{MaxConcurrent: p.Capacity.MaxConcurrent, MaxTokensInFlight: p.Capacity.MaxTokensInFlight}
		paths = append(paths, pathMap{"targets." + p.Name, fmt.Sprintf("providers[%d].capacity", i)})
	}
	if a := d.Admission; a != nil {
		cfg.InputWeight, cfg.OutputWeight = a.InputWeight, a.OutputWeight
		for name, c := range a.Classes {
			if !classNameRE.MatchString(name) {
				errs = append(errs, d.ErrorAt(deployment.ChildField("admission.classes", name), true,
					"invalid class name %q: use letters, digits, '_' and '-', starting with a letter or digit", name))
				continue
			}
			cfg.Classes[name] = admission.Class{
				ReservedShare: c.ReservedShare, MaxShare: c.MaxShare,
				DefaultDeadline: c.DefaultDeadline.D(), MaxDeadline: c.MaxDeadline.D(),
				MaxQueuedWork: c.MaxQueuedWork, BurstHeadroom: c.BurstHeadroom,
			}
		}
	}
	for i, app := range d.Applications {
		if app.Admission == nil || app.ID == "" {
			continue
		}
		base := fmt.Sprintf("applications[%d].admission", i)
		if w := app.Admission.Weight; w != 0 {
			cfg.Weights[app.ID] = w
			paths = append(paths, pathMap{"weights." + app.ID, base + ".weight"})
		}
		if c := app.Admission.Class; c != "" {
			cfg.AppClasses[app.ID] = c
			paths = append(paths, pathMap{"appClasses." + app.ID, base + ".class"})
		}
	}
	if err := cfg.Validate(); err != nil {
		var ce admission.ConfigError
		if !errors.As(err, &ce) {
			return admission.Config{}, err
		}
		for _, fe := range ce {
			field := mapField(fe.Field, paths)
			// A problem of a whole mapping is shown at its key.
			whole := strings.HasSuffix(field, ".capacity") || field == "admission.classes"
			errs = append(errs, d.ErrorAt(field, whole, "%s", fe.Message))
		}
	}
	if len(errs) > 0 {
		return admission.Config{}, errs.Normalize()
	}
	return cfg, nil
}

// pathMap maps a field path prefix of admission.Config to the document's.
type pathMap struct{ from, to string }

// mapField is the document's field path of the scheduler's field f: the
// longest prefix of paths that f starts with, replaced (provider names may
// hold dots; class names never do).
func mapField(f string, paths []pathMap) string {
	best := -1
	for i, m := range paths {
		if (f == m.from || strings.HasPrefix(f, m.from+".")) && (best < 0 || len(m.from) > len(paths[best].from)) {
			best = i
		}
	}
	if best < 0 {
		return "admission"
	}
	return paths[best].to + f[len(paths[best].from):]
}
