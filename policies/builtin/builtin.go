// Package builtin lists the built-in policy definitions. It is the one place
// that imports every policy package.
package builtin

import (
	"sluice/policies"
	"sluice/policies/advancedratelimit"
	"sluice/policies/apikeyauth"
	"sluice/policies/basicratelimit"
	"sluice/policies/costratelimit"
	"sluice/policies/fairadmission"
	"sluice/policies/llmcost"
	"sluice/policies/modelaccess"
	"sluice/policies/tokenratelimit"
)

// Definitions returns the built-in definitions.
func Definitions() []policies.Definition {
	return []policies.Definition{
		apikeyauth.Definition(),
		modelaccess.Definition(),
		llmcost.Definition(),
		tokenratelimit.Definition(),
		basicratelimit.Definition(),
		costratelimit.Definition(),
		advancedratelimit.Definition(),
		fairadmission.Definition(),
	}
}

// Registry returns a new registry of the built-in definitions.
func Registry() *policies.Registry {
	return policies.NewRegistry(Definitions()...)
}
