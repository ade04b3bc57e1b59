package platform

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"

	"sluice/counter/counterconfig"
	"sluice/deployment"
	"sluice/deployment/yamlfile"
	"sluice/platform/delivery"
	"sluice/platform/secrets"
	"sluice/platform/store"
)

// The counters setting is the counters section of every generated
// deployment (docs/platform.md, "Cluster-wide counters"). It is a process
// option (Options.Counters, the flags of `sluice platform` and `sluice
// serve`), stored sealed so that every platform replica renders one document
// per version and a change is a new version: at start the platform compares
// its option with the stored setting and, when they differ, stores the new
// one, bumps the version and audits the change, in one transaction. Running
// gateways then receive a document whose counters section changed, which they
// log and do not apply until they restart (internal/app): a counter store is
// chosen once per process.

// startupActor is the audit log's token id for changes made at start by the
// platform's own options.
const startupActor = "startup"

// CountersProblems returns the problems of c as the counters section of a
// deployment (deployment.Validate's checks, fields "counters.redis.url",
// ...), nil when it is usable. Messages never show a password.
func CountersProblems(c deployment.Counters) deployment.Errors {
	err := deployment.Validate(&deployment.Deployment{APIVersion: deployment.APIVersion, Counters: c})
	var all deployment.Errors
	if !errors.As(err, &all) {
		return nil
	}
	var out deployment.Errors
	for _, e := range all {
		if strings.HasPrefix(e.Field, "counters.") || e.Field == "counters" {
			out = append(out, e)
		}
	}
	return out
}

// normalCounters is c as generated documents carry it: nothing for the
// memory store (the documents of a platform without the setting are those of
// earlier versions), else c with its defaults filled in, so that leaving out
// a default and giving it are the same setting.
func normalCounters(c deployment.Counters) deployment.Counters {
	if c.Backend == "" || c.Backend == counterconfig.Memory {
		return deployment.Counters{}
	}
	d := deployment.Deployment{Counters: c}
	deployment.ApplyDefaults(&d)
	if len(d.Counters.Redis.Addrs) == 0 {
		d.Counters.Redis.Addrs = nil
	}
	return d.Counters
}

// syncCounters makes the stored counters setting o.Counters (see above).
func syncCounters(ctx context.Context, st store.Store, box *secrets.Box, o Options) error {
	want := normalCounters(o.Counters)
	return st.Write(ctx, func(tx store.Tx) error {
		sealed, err := tx.Counters(ctx)
		if err != nil {
			return err
		}
		had, err := delivery.OpenCounters(box, sealed)
		if err != nil {
			// The stored value is only a copy of an earlier start's option.
			o.Logger.Warn("the stored counters setting does not open (was the secret key changed?); replacing it", "error", err)
			had = deployment.Counters{Backend: "(unreadable)"}
		}
		if counterconfig.Equal(normalCounters(had), want) {
			o.Logger.Info("counters of the generated deployments", describeCounters(want)...)
			return nil
		}
		if sealed, err = delivery.SealCounters(box, want); err != nil {
			return err
		}
		if err := tx.SetCounters(ctx, sealed); err != nil {
			return err
		}
		v, err := tx.BumpVersion(ctx)
		if err != nil {
			return err
		}
		before, err := countersView(had)
		if err != nil {
			return err
		}
		after, err := countersView(want)
		if err != nil {
			return err
		}
		if _, err := tx.InsertAudit(ctx, store.AuditEntry{At: o.Now(), TokenID: startupActor, Action: "counters.update",
			ResourceType: "counters", ResourceID: "deployment", Before: before, After: after}); err != nil {
			return err
		}
		attrs := append([]any{"version", v}, describeCounters(want)...)
		o.Logger.Warn("the counters setting of the generated deployments changed: running gateways keep their counter store until they restart",
			append(attrs, slog.String("before", string(before)))...)
		return nil
	})
}

// describeCounters is c as log attributes, without credentials.
func describeCounters(c deployment.Counters) []any {
	if c.Backend == "" {
		return []any{"backend", counterconfig.Memory, "scope", "each gateway counts alone"}
	}
	return counterconfig.Describe(c)
}

// countersView is c as the audit log shows it: the counters section of the
// document as JSON, credentials redacted ({"backend": "memory"} for none).
func countersView(c deployment.Counters) ([]byte, error) {
	if c.Backend == "" {
		return []byte(`{"backend":"memory"}`), nil
	}
	b, err := yamlfile.JSON(&deployment.Deployment{Counters: delivery.RedactCounters(c)})
	if err != nil {
		return nil, err
	}
	var doc struct {
		Counters json.RawMessage `json:"counters"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	return doc.Counters, nil
}
