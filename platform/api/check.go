package api

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"sluice/deployment"
	"sluice/platform/delivery"
	"sluice/platform/generate"
	"sluice/platform/store"
)

// fieldMapper turns a problem of the generated document (its field path,
// e.g. "routes[0].policies[3].params.x", and the origin of the entry it
// names, if any) into a problem of the request being checked.
type fieldMapper func(field string, entry int, origin *generate.Origin, msg string) Problem

var entryRE = regexp.MustCompile(`^routes\[0\]\.policies\[(\d+)\](?:\.(.*))?$`)

// checkProvider generates provider id's route from what tx holds (the
// request's change included, keys redacted) and checks it as `sluice
// validate` does: structure, params against each policy's schema, and the
// chain built with stand-in services. Problems come back as one 422, mapped
// by m; the caller's transaction must then roll back.
func (s *Server) checkProvider(ctx context.Context, tx store.Tx, id string, m fieldMapper) error {
	// The grants do not change whether the chain builds (api-key-auth takes
	// any list of ids), so the check needs the provider alone.
	sp, err := tx.GetProvider(ctx, id)
	if err != nil {
		return storeError(err, "provider", id)
	}
	p, err := delivery.ProviderSettings(sp, delivery.Secrets{Redact: true})
	if err != nil {
		return err
	}
	gs, err := tx.ListGuardrails(ctx, id)
	if err != nil {
		return err
	}
	for _, g := range gs {
		gg, err := delivery.GuardrailEntry(g)
		if err != nil {
			return err
		}
		p.Guardrails = append(p.Guardrails, gg)
	}
	one := []generate.Provider{p}
	res, err := generate.Generate(generate.Settings{Providers: one})
	if err != nil {
		return invalid([]Problem{problem("$", "%v", err)})
	}
	cerr := s.checker.Check(res.Deployment)
	if cerr == nil {
		return nil
	}
	var errs deployment.Errors
	if !errors.As(cerr, &errs) {
		return invalid([]Problem{problem("$", "%v", cerr)})
	}
	origins := res.Origins[one[0].Name]
	var ps []Problem
	for _, e := range errs {
		entry := -1
		var origin *generate.Origin
		if mm := entryRE.FindStringSubmatch(e.Field); mm != nil {
			entry, _ = strconv.Atoi(mm[1])
			if entry < len(origins) {
				origin = &origins[entry]
			}
		}
		ps = append(ps, m(e.Field, entry, origin, e.Message))
	}
	return invalid(dedupe(ps))
}

// entryRest is the part of a field path after "routes[0].policies[i]."
// ("params.totalTokenLimits[0].count"), "" for the entry itself.
func entryRest(field string) string {
	if mm := entryRE.FindStringSubmatch(field); mm != nil {
		return mm[2]
	}
	return ""
}

// describe names the entry a problem is about, for messages whose path
// cannot point into the request.
func describe(entry int, origin *generate.Origin) string {
	switch {
	case origin == nil:
		return ""
	case origin.Kind == generate.OriginGuardrail:
		return fmt.Sprintf("guardrail %s (chain entry %d): ", origin.Ref, entry)
	case origin.Kind == generate.OriginRateLimit:
		return fmt.Sprintf("rate limit %s (chain entry %d): ", origin.Ref, entry)
	}
	return fmt.Sprintf("generated %s entry %d: ", origin.Kind, entry)
}

// guardrailMapper points problems of guardrail id's entry into the request
// body ($.params..., $.name, $.version); others are reported at $ with the
// entry they concern.
func guardrailMapper(id string) fieldMapper {
	return func(field string, entry int, origin *generate.Origin, msg string) Problem {
		if origin != nil && origin.Kind == generate.OriginGuardrail && origin.Ref == id {
			if rest := entryRest(field); rest != "" {
				return problem("$."+rest, "%s", msg)
			}
			return problem("$", "%s", msg)
		}
		return problem("$", "%s%s", describe(entry, origin), msg)
	}
}

// rateLimitMapper points problems of generated limit entries at the limit's
// path in the settings.
func rateLimitMapper(field string, entry int, origin *generate.Origin, msg string) Problem {
	if origin != nil && origin.Kind == generate.OriginRateLimit {
		return problem(origin.Ref, "%s", msg)
	}
	return problem("$", "%s%s", describe(entry, origin), msg)
}

var providerFieldRE = regexp.MustCompile(`^providers\[0\]\.(.*)$`)

// providerMapper points problems of the provider's document fields into a
// ProviderInput body.
func providerMapper(field string, entry int, origin *generate.Origin, msg string) Problem {
	if mm := providerFieldRE.FindStringSubmatch(field); mm != nil {
		rest := mm[1]
		if rest == "auth.header" {
			rest = "authHeader"
		}
		return problem("$."+rest, "%s", msg)
	}
	switch field {
	case "routes[0].name", "routes[0].context", "providers[0]":
		return problem("$.name", "%s", msg)
	}
	return problem("$", "%s%s", describe(entry, origin), msg)
}
