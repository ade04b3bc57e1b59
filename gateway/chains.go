package gateway

import (
	"errors"

	"sluice/deployment"
	"sluice/policies"
)

// buildChains builds every route's chain of d with the gateway's services
// svc, keyed by route name (an empty chain for a route without policies).
// Every route is tried; problems are returned together as deployment.Errors
// positioned in d's source, and then no chains are returned (those that were
// built are closed). The conversion
// of a route to a chain is policies' BuildRoute, the one the dry-run check
// (`sluice validate`, the platform) runs with stand-in services.
func buildChains(d *deployment.Deployment, reg *policies.Registry, svc *policies.Services) (map[string]*policies.Chain, error) {
	chains := make(map[string]*policies.Chain, len(d.Routes))
	var errs deployment.Errors
	for i, r := range d.Routes {
		ch, err := reg.BuildRoute(d, i, svc)
		if err != nil {
			var es deployment.Errors
			if !errors.As(err, &es) {
				return nil, err
			}
			errs = append(errs, es...)
			continue
		}
		chains[r.Name] = ch
	}
	if len(errs) > 0 {
		for name, ch := range chains {
			if cerr := ch.Close(); cerr != nil {
				svc.Logger.Warn("closing the instances of a chain that will not serve", "route", name, "error", cerr)
			}
		}
		return nil, errs.Normalize()
	}
	return chains, nil
}
