package ratelimit

import (
	"errors"
	"fmt"
	"net/http"

	"sluice/gwerror"
	"sluice/policies"
	"sluice/pricing"
)

// PricerSource is implemented by llm-cost: the pricer it charges with (the
// gateway's catalog, its pricing file, its defaultPrice).
type PricerSource interface {
	Pricer() pricing.Pricer
}

// LinkedPricer returns the pricer of the first PricerSource after entries[self]:
// final phases run in reverse list order, so that is the instance whose
// x-llm-cost the policy at self reads, and its pricer is the one an estimate
// must use. ok is false when no member after self prices.
func LinkedPricer(entries []policies.Entry, self int) (p pricing.Pricer, ok bool) {
	for _, e := range entries[self+1:] {
		if ps, ok := e.Policy.(PricerSource); ok {
			return ps.Pricer(), true
		}
	}
	return nil, false
}

// ErrNoPricer is the LinkChain error of a cost limit without an llm-cost
// after it.
var ErrNoPricer = errors.New("no llm-cost after it in the chain to price its requests; list llm-cost after " +
	"the cost limit (final phases run in reverse order)")

// ModelNotPriced is the 400 a cost limit answers for a model its pricer
// cannot price: the budget cannot be kept on spend it cannot count.
func ModelNotPriced(policy, route, model string) *gwerror.Error {
	return &gwerror.Error{Status: http.StatusBadRequest, Type: gwerror.TypeInvalidRequest, Code: gwerror.CodeModelNotPriced,
		Param: "model", Policy: policy,
		Message: fmt.Sprintf("%s: model %q has no price, so route %s cannot keep its budget for it; "+
			"add the model to a pricing file (llm-cost pricingFile or the gateway's --pricing) or set llm-cost defaultPrice",
			policy, model, route)}
}
