// Package llmcost is the llm-cost policy: it prices the request's usage (the
// one the gateway published, sharedctx Usage) with the pricing catalog and
// publishes the cost, the request's one cost fact, with sharedctx SetCost:
// metadata x-llm-cost (integer micro-USD, rounded up) and x-llm-cost-status,
// for the cost limit policies and for analytics.
//
// Ordering: llm-cost is listed after the limit policies that read its result.
// Response and final phases run in reverse list order, so llm-cost's response
// (bodies) or final (streams) call runs before theirs.
package llmcost

import (
	"errors"
	"net/http"

	"sluice/dialect"
	"sluice/gwerror"
	"sluice/llmapi"
	"sluice/policies"
	"sluice/pricing"
	"sluice/sharedctx"
)

// Name and Version identify the definition.
const (
	Name    = "llm-cost"
	Version = "v1"
)

// Values of x-llm-cost-status.
const (
	// StatusCalculated: the cost was computed from authoritative usage (with the
	// catalog's price, or defaultPrice for a model the catalog does not know).
	StatusCalculated = sharedctx.CostStatusCalculated
	// StatusEstimated: the cost was computed, the same way, from usage the
	// gateway counted because the provider reported none (a stream the client
	// left, the upstream cut, or that ended without usage): the output the
	// client received and the prompt estimate. It is a lower bound of what the
	// provider bills; cost limits charge at least it, never less than their
	// estimate.
	StatusEstimated = sharedctx.CostStatusEstimated
	// StatusUnpriced: the model is not in the catalog and no defaultPrice is set;
	// the cost is reported as 0.
	StatusUnpriced = sharedctx.CostStatusUnpriced
	// StatusNoUsage: neither the provider nor the gateway has usage to price
	// (nothing was delivered); the cost is reported as 0.
	StatusNoUsage = sharedctx.CostStatusNoUsage
)

// HeaderCost is the response header carrying the cost in USD on non-streamed
// responses (set only when the status is "calculated"): x-llm-cost, the
// micro-USD the budgets count, as a decimal number of dollars.
const HeaderCost = "X-Sluice-Cost-Usd"

// Analytics keys written on every request.
const (
	AnalyticsCost   = "cost_usd"
	AnalyticsStatus = "cost_status"
	AnalyticsModel  = "cost_model"
)

// Params configures llm-cost. Prices are USD per million tokens.
type Params struct {
	// Path of an extra pricing file (YAML or JSON, same shape as the embedded
	// table: models: {name: {input, cachedInput, cacheWrite, output, tiers,
	// aliases}}) whose entries add to or replace the gateway's catalog for this
	// instance only. Read when the chain is built (at startup and on reload).
	PricingFile string `json:"pricingFile,omitempty" jsonschema:"minLength=1"`
	// Price used for models the catalog does not know. Without it such requests
	// get status "unpriced" and cost 0, and a cost limit listed before this
	// instance (llm-cost-based-ratelimit) refuses them with 400
	// model_not_priced.
	DefaultPrice *DefaultPrice `json:"defaultPrice,omitempty"`
}

// DefaultPrice is a fallback price in USD per million tokens.
type DefaultPrice struct {
	// USD per million prompt tokens (cached tokens included).
	Input float64 `json:"input" jsonschema:"required,minimum=0"`
	// USD per million completion tokens (reasoning tokens included).
	Output float64 `json:"output" jsonschema:"required,minimum=0"`
}

// Definition returns the llm-cost v1 definition.
func Definition() policies.Definition {
	d := policies.Define(Name, Version,
		"Prices each request's token usage from the model price catalog (cached input, cache writes, long-context tiers) and writes the cost in micro-USD to metadata x-llm-cost, for cost-based rate limits and usage records.",
		build)
	d.Reads = []policies.MetaKey{
		{Key: sharedctx.KeyLLMUsage, Phase: policies.PhaseResponse, Optional: true},
	}
	// x-llm-cost-status is declared in the final phase only (it is also
	// written in the response phase for bodies): a limit policy that declares
	// a required final-phase read of it gets the load-time ordering check
	// ("list llm-cost after ..."). x-llm-cost is declared in both phases, so a
	// final-phase read of it alone is always satisfied by the response write.
	d.Writes = []policies.MetaKey{
		{Key: sharedctx.KeyLLMCost, Phase: policies.PhaseResponse},
		{Key: sharedctx.KeyLLMCost, Phase: policies.PhaseFinal},
		{Key: sharedctx.KeyLLMCostStatus, Phase: policies.PhaseFinal},
	}
	return d
}

// DefaultModel is the Model.Name (and analytics cost_model) of a price that
// came from defaultPrice.
const DefaultModel = "default"

// resolver is the instance's pricer: the catalog (with the instance's pricing
// file), then defaultPrice for a model the catalog does not know.
type resolver struct {
	catalog      *pricing.Catalog
	defaultPrice *pricing.Price
}

func (r *resolver) Resolve(model string) (pricing.Model, bool) {
	if m, ok := r.catalog.Resolve(model); ok {
		return m, true
	}
	if r.defaultPrice != nil {
		return pricing.Model{Name: DefaultModel, Price: *r.defaultPrice, Source: "defaultPrice"}, true
	}
	return pricing.Model{}, false
}

// policy is immutable after build and safe for concurrent use.
type policy struct {
	pricer resolver
	// doneKey is this instance's metadata slot recording the status it wrote,
	// so the final phase knows whether the response phase already priced the
	// request.
	doneKey string
}

func build(p *Params, route policies.RouteInfo, svc *policies.Services) (policies.Policy, error) {
	cat := svc.Pricing
	if p.PricingFile != "" {
		var err error
		if cat == nil {
			cat, err = pricing.New(p.PricingFile)
		} else {
			cat, err = cat.WithFile(p.PricingFile)
		}
		if err != nil {
			return nil, policies.ParamErrors{{Path: []string{"pricingFile"}, Message: err.Error()}}
		}
	}
	if cat == nil {
		return nil, errors.New("no pricing catalog in the gateway services (wiring bug)")
	}
	pol := &policy{pricer: resolver{catalog: cat}, doneKey: sharedctx.InstanceKey(route.InstanceID, "llm-cost.status")}
	if p.DefaultPrice != nil {
		pol.pricer.defaultPrice = &pricing.Price{
			Input: p.DefaultPrice.Input, CachedInput: p.DefaultPrice.Input, CacheWrite: p.DefaultPrice.Input,
			Output: p.DefaultPrice.Output,
		}
	}
	return pol, nil
}

// Pricer is the pricer this instance charges with (its pricing file and
// defaultPrice included). A cost limit estimates with it, so that what it
// reserves and what llm-cost charges use one price.
func (p *policy) Pricer() pricing.Pricer { return &p.pricer }

// OnRequest admits every request; llm-cost only observes.
func (p *policy) OnRequest(*policies.Call) *gwerror.Error { return nil }

// OnResponse prices a non-streamed response from the usage the gateway
// published before this phase, and sets the cost header. Streams are priced
// in the final phase, when their usage is known.
func (p *policy) OnResponse(c *policies.Call, r *policies.Response) *gwerror.Error {
	if r.Stream {
		return nil
	}
	micros, status := p.price(c, c.Shared.Usage())
	if status == StatusCalculated {
		if c.ClientHeader == nil {
			c.ClientHeader = http.Header{}
		}
		c.ClientHeader.Set(HeaderCost, dialect.Dollars(micros))
	}
	return nil
}

// OnFinal prices the request when the response phase did not (streams,
// upstream failures, rejections), or re-prices it when usage arrived only now.
func (p *policy) OnFinal(c *policies.Call, o *policies.Outcome) {
	if prev, _ := c.Shared.Metadata[p.doneKey].(string); prev != "" && prev != StatusNoUsage {
		return
	}
	u := c.Shared.Usage()
	if prev, _ := c.Shared.Metadata[p.doneKey].(string); prev == StatusNoUsage && !priceable(u) {
		return
	}
	p.price(c, u)
}

// price computes the cost of u in micro-USD and publishes it; it returns what
// it wrote.
func (p *policy) price(c *policies.Call, u *llmapi.Usage) (int64, string) {
	model := c.Shared.ServedModel()
	var cost int64
	var status string
	var priced string
	if priceable(u) {
		ok := StatusCalculated
		if !u.Authoritative {
			ok = StatusEstimated
		}
		if m, found := p.pricer.Resolve(model); found {
			cost, status, priced = m.Price.CostMicros(u), ok, m.Name
		} else {
			status = StatusUnpriced
		}
	} else {
		status = StatusNoUsage
	}
	c.Shared.SetCost(cost, status)
	boxed := sharedctx.StatusValue(status)
	c.Shared.Metadata[p.doneKey] = boxed
	if c.Shared.Analytics != nil {
		c.Shared.Analytics[AnalyticsCost] = sharedctx.MicroUSD(cost).USD()
		c.Shared.Analytics[AnalyticsStatus] = boxed
		if priced != "" {
			c.Shared.Analytics[AnalyticsModel] = priced
		}
	}
	return cost, status
}

// priceable reports whether u holds numbers to price: provider-reported
// (authoritative) or counted by the gateway. Partial streams (fewer finished
// choices than requested) are still priced: the cost of what was reported;
// limit policies decide how to settle them.
func priceable(u *llmapi.Usage) bool { return u != nil && (u.Authoritative || u.Counted) }

var _ interface {
	policies.ResponseHandler
	policies.Finalizer
} = (*policy)(nil)
