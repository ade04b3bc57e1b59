package policies

import "sluice/sharedctx"

// GatewayProvided is the metadata the gateway itself writes for every chain:
// the normalised usage (sharedctx's SetUsage, key x-llm-usage) before the
// response phase. Chains are built with it as BuildChain's provided keys.
// Read-only.
var GatewayProvided = []MetaKey{{Key: sharedctx.KeyLLMUsage, Phase: PhaseResponse}}
