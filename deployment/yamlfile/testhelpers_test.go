package yamlfile

import (
	"errors"
	"fmt"

	"sluice/gwerror"
	"sluice/policies"
)

// Fake policy definitions, so these tests do not depend on the built-in
// policies (written elsewhere).

type nopPolicy struct{}

func (nopPolicy) OnRequest(*policies.Call) *gwerror.Error { return nil }

type fakeAuthParams struct {
	Header string `json:"header,omitempty"`
}

type fakeLimit struct {
	Count    int64             `json:"count" jsonschema:"required,minimum=1"`
	Duration policies.Duration `json:"duration" jsonschema:"required"`
}

type fakeLimitParams struct {
	TotalTokenLimits []fakeLimit `json:"totalTokenLimits,omitempty"`
	ConsumerBased    bool        `json:"consumerBased,omitempty"`
}

type fakeEmptyParams struct{}

func testRegistry() *policies.Registry {
	auth := policies.Define("fake-auth", "v1", "needs the key index",
		func(p *fakeAuthParams, r policies.RouteInfo, svc *policies.Services) (policies.Policy, error) {
			if svc == nil || svc.Keys == nil {
				return nil, errors.New("fake-auth needs Services.Keys")
			}
			return nopPolicy{}, nil
		})
	auth.Writes = []policies.MetaKey{{Key: "x-application-id", Phase: policies.PhaseRequest}}
	limit := policies.Define("fake-limit", "v1", "token limits",
		func(p *fakeLimitParams, r policies.RouteInfo, svc *policies.Services) (policies.Policy, error) {
			if svc == nil || svc.Counters == nil {
				return nil, errors.New("fake-limit needs Services.Counters")
			}
			return nopPolicy{}, nil
		})
	costReader := policies.Define("fake-cost-limit", "v1", "reads x-llm-cost",
		func(p *fakeEmptyParams, r policies.RouteInfo, svc *policies.Services) (policies.Policy, error) {
			return nopPolicy{}, nil
		})
	costReader.Reads = []policies.MetaKey{{Key: "x-llm-cost", Phase: policies.PhaseResponse}}
	costWriter := policies.Define("fake-cost", "v1", "writes x-llm-cost",
		func(p *fakeEmptyParams, r policies.RouteInfo, svc *policies.Services) (policies.Policy, error) {
			return nopPolicy{}, nil
		})
	costWriter.Reads = []policies.MetaKey{{Key: "x-llm-usage", Phase: policies.PhaseResponse}}
	costWriter.Writes = []policies.MetaKey{{Key: "x-llm-cost", Phase: policies.PhaseResponse}}
	broken := policies.Define("fake-broken", "v1", "constructor rejects params",
		func(p *fakeLimitParams, r policies.RouteInfo, svc *policies.Services) (policies.Policy, error) {
			if len(p.TotalTokenLimits) == 0 {
				return nil, policies.ParamErrors{{Path: []string{"totalTokenLimits"}, Message: "at least one limit is required"}}
			}
			return nil, fmt.Errorf("always fails")
		})
	return policies.NewRegistry(auth, limit, costReader, costWriter, broken)
}
