package deploymentdoc

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"sluice/counter"
	"sluice/gateway/config"
	"sluice/policies"
	"sluice/pricing"
	"sluice/tokencount"
)

// Checker runs Check's validation with its stand-in services built once
// (the embedded price catalog and the tokenizer), for callers that check
// often (every platform write). Safe for concurrent use.
type Checker struct {
	reg    *policies.Registry
	prices *pricing.Catalog
	tokens *tokencount.Counter
	log    *slog.Logger
}

// NewChecker returns a Checker for reg.
func NewChecker(reg *policies.Registry) (*Checker, error) {
	cat, err := pricing.New("")
	if err != nil {
		return nil, err
	}
	return &Checker{reg: reg, prices: cat, tokens: tokencount.New(), log: slog.New(slog.DiscardHandler)}, nil
}

// Check is what Check does: d's structure, then every chain built with
// stand-in services (a counter store that is never reached during
// construction). Problems are Errors.
func (c *Checker) Check(d *Deployment) error {
	var out Errors
	collect := func(err error) {
		var es Errors
		switch {
		case err == nil:
		case errors.As(err, &es):
			out = append(out, es...)
		default:
			out = append(out, &Error{File: d.Source, Message: err.Error()})
		}
	}
	collect(config.Validate(d))
	svc := &policies.Services{Logger: c.log, Now: time.Now, Keys: config.NewKeyIndex(d), Counters: unreachable{},
		Pricing: c.prices, Tokens: c.tokens}
	_, err := config.BuildChains(d, c.reg, svc)
	collect(err)
	if len(out) == 0 {
		return nil
	}
	return out
}

// unreachable is a counter store for chain construction only.
type unreachable struct{}

func (unreachable) Reserve(context.Context, []counter.Debit, *counter.Result) error {
	return counter.ErrUnavailable
}
func (unreachable) Adjust(context.Context, []counter.Debit, *counter.Ticket, []int64) error {
	return counter.ErrUnavailable
}
func (unreachable) Peek(context.Context, []counter.Debit, *counter.Result) error {
	return counter.ErrUnavailable
}
func (unreachable) Close() error { return nil }
