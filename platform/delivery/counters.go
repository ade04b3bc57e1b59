package delivery

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"

	"sluice/deployment"
	"sluice/deployment/yamlfile"
	"sluice/platform/secrets"
)

// countersAAD binds a sealed counters setting to its place in the store.
const countersAAD = "deployment_state.counters"

// SealCounters seals the counters setting for the store (it may hold a Redis
// password) in the document's own rendering, so that it reads back with the
// document's defaults and validation; the zero setting (every gateway counts
// in memory) is nil.
func SealCounters(box *secrets.Box, c deployment.Counters) ([]byte, error) {
	if reflect.DeepEqual(c, deployment.Counters{}) {
		return nil, nil
	}
	text, err := yamlfile.Loadable(&deployment.Deployment{APIVersion: deployment.APIVersion, Counters: c})
	if err != nil {
		return nil, err
	}
	return box.Seal(text, countersAAD)
}

// OpenCounters opens what SealCounters sealed (nil: the zero setting).
func OpenCounters(box *secrets.Box, sealed []byte) (deployment.Counters, error) {
	if sealed == nil {
		return deployment.Counters{}, nil
	}
	if box == nil {
		return deployment.Counters{}, errors.New("counters setting: sealed, and no key to open it")
	}
	text, err := box.Open(sealed, countersAAD)
	if err != nil {
		return deployment.Counters{}, fmt.Errorf("counters setting: %w", err)
	}
	d, err := yamlfile.ParseRendered(text, "the stored counters setting")
	if err != nil {
		return deployment.Counters{}, err
	}
	return d.Counters, nil
}

// RedactCounters is c as shown to people (the API's deployment view, the
// audit log, the platform's logs): the password of the Redis URL reads
// "xxxxx" (net/url's Redacted, so the URL still parses) and the password
// field Redacted.
func RedactCounters(c deployment.Counters) deployment.Counters {
	r := &c.Redis
	if r.URL != "" {
		if u, err := url.Parse(r.URL); err == nil {
			r.URL = u.Redacted()
		} else {
			r.URL = Redacted
		}
	}
	if r.Password != "" {
		r.Password = Redacted
	}
	r.Addrs = append([]string(nil), r.Addrs...)
	return c
}
