package usage

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"sluice/platform/store"
)

// Report is a provider usage report (docs/platform.md, "Reconciliation"):
// what the provider says it served over a period, by tenant (the
// application id the gateway sent in the provider's applicationHeader) and
// model. Its JSON is the body of sluice mock-llm's GET /mock/usage; only the
// fields below are read, every other one is ignored.
type Report struct {
	Tenants map[string]ReportTenant `json:"tenants"`
}

// ReportTenant is one tenant of a Report: its usage by model.
type ReportTenant struct {
	Models map[string]Reported `json:"models"`
}

// Reported is what a provider reports for one tenant and model.
type Reported struct {
	Requests         int64 `json:"requests"`
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// DecodeReport reads a provider usage report. It refuses a body that is not
// a JSON object with a "tenants" object, and negative counts.
func DecodeReport(b []byte) (Report, error) {
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return Report{}, fmt.Errorf("not a provider usage report: %w", err)
	}
	if r.Tenants == nil {
		return Report{}, errors.New(`not a provider usage report: no "tenants" object`)
	}
	for tenant, t := range r.Tenants {
		for model, u := range t.Models {
			if u.Requests < 0 || u.PromptTokens < 0 || u.CompletionTokens < 0 {
				return Report{}, fmt.Errorf("provider usage report: tenants.%s.models.%s: negative count", tenant, model)
			}
		}
	}
	return r, nil
}

// Counts are requests that reached the provider's model and their tokens.
type Counts struct {
	Requests, PromptTokens, CompletionTokens int64
}

func (c *Counts) add(o Counts) {
	c.Requests += o.Requests
	c.PromptTokens += o.PromptTokens
	c.CompletionTokens += o.CompletionTokens
}

func (c Counts) minus(o Counts) Counts {
	return Counts{c.Requests - o.Requests, c.PromptTokens - o.PromptTokens, c.CompletionTokens - o.CompletionTokens}
}

// ReconciliationRow compares one application and model. Delta is Reported
// minus Metered.
type ReconciliationRow struct {
	Application, Model       string
	Metered, Reported, Delta Counts
}

// Reconciliation is the comparison of a period's metered usage with a
// provider's report.
type Reconciliation struct {
	// Rows has one row per application and model metered or reported (a
	// reported model with nothing in it is left out), ordered by
	// application then model; Mismatches are the rows with a non-zero
	// delta, in the same order.
	Rows, Mismatches         []ReconciliationRow
	Metered, Reported, Delta Counts
}

// Reconcile compares metered usage (store.Tx.MeteredUsage) with a
// provider's report.
func Reconcile(metered []store.MeteredUsage, report Report) Reconciliation {
	type key struct{ app, model string }
	rows := map[key]*ReconciliationRow{}
	row := func(app, model string) *ReconciliationRow {
		k := key{app, model}
		if rows[k] == nil {
			rows[k] = &ReconciliationRow{Application: app, Model: model}
		}
		return rows[k]
	}
	for _, m := range metered {
		row(m.Application, m.Model).Metered.add(Counts{m.Requests, m.PromptTokens, m.CompletionTokens})
	}
	for tenant, t := range report.Tenants {
		for model, u := range t.Models {
			if u == (Reported{}) {
				continue
			}
			row(tenant, model).Reported.add(Counts(u))
		}
	}
	var out Reconciliation
	for _, r := range rows {
		r.Delta = r.Reported.minus(r.Metered)
		out.Rows = append(out.Rows, *r)
		out.Metered.add(r.Metered)
		out.Reported.add(r.Reported)
	}
	slices.SortFunc(out.Rows, func(a, b ReconciliationRow) int {
		return cmp.Or(cmp.Compare(a.Application, b.Application), cmp.Compare(a.Model, b.Model))
	})
	for _, r := range out.Rows {
		if r.Delta != (Counts{}) {
			out.Mismatches = append(out.Mismatches, r)
		}
	}
	out.Delta = out.Reported.minus(out.Metered)
	return out
}
