package pricing

import (
	"math"

	"sluice/internal/satmath"
	"sluice/llmapi"
)

// picoPerMicro converts pico-USD to micro-USD.
const picoPerMicro = 1_000_000

// ForPrompt returns the flat price (no tiers) that applies to a request with
// promptTokens prompt tokens: the tier with the highest AbovePromptTokens
// strictly below promptTokens, or the base price.
func (p Price) ForPrompt(promptTokens int64) Price {
	flat := Price{Input: p.Input, CachedInput: p.CachedInput, CacheWrite: p.CacheWrite, Output: p.Output}
	best := int64(-1)
	for _, t := range p.Tiers {
		if promptTokens > t.AbovePromptTokens && t.AbovePromptTokens > best {
			best = t.AbovePromptTokens
			flat = Price{Input: t.Input, CachedInput: t.CachedInput, CacheWrite: t.CacheWrite, Output: t.Output}
		}
	}
	return flat
}

// CostPico prices u in pico-USD:
//
//	(prompt - cached - cacheWrite)*input + cached*cachedInput
//	  + cacheWrite*cacheWrite + completion*output
//
// with the tier chosen by u.PromptTokens. CompletionTokens is taken to include
// reasoning tokens (OpenAI's convention; the gateway normalises other shapes).
// Negative counts are treated as 0, cached and cache-write counts are capped at
// the prompt, and the result saturates at math.MaxInt64 instead of wrapping.
func (p Price) CostPico(u *llmapi.Usage) int64 {
	if u == nil {
		return 0
	}
	prompt := max(u.PromptTokens, 0)
	cached := min(max(u.CachedPromptTokens, 0), prompt)
	write := min(max(u.CacheWriteTokens, 0), prompt-cached)
	plain := prompt - cached - write
	f := p.ForPrompt(prompt)
	sum := satmath.Mul(plain, picoPerToken(f.Input))
	sum = satmath.Add(sum, satmath.Mul(cached, picoPerToken(f.CachedInput)))
	sum = satmath.Add(sum, satmath.Mul(write, picoPerToken(f.CacheWrite)))
	sum = satmath.Add(sum, satmath.Mul(max(u.CompletionTokens, 0), picoPerToken(f.Output)))
	return sum
}

// Cost prices u in USD (see CostPico).
func (p Price) Cost(u *llmapi.Usage) float64 { return picoToUSD(p.CostPico(u)) }

// CostMicros prices u in micro-USD, rounded up so that budgets never
// undercount a non-zero cost.
func (p Price) CostMicros(u *llmapi.Usage) int64 { return picoToMicrosCeil(p.CostPico(u)) }

// EstimatePico prices promptTokens at the input rate (nothing assumed cached)
// and outputTokens at the output rate, the tier chosen by promptTokens.
func (p Price) EstimatePico(promptTokens, outputTokens int64) int64 {
	return p.CostPico(&llmapi.Usage{PromptTokens: promptTokens, CompletionTokens: outputTokens})
}

// Estimate is EstimatePico in USD.
func (p Price) Estimate(promptTokens, outputTokens int64) float64 {
	return picoToUSD(p.EstimatePico(promptTokens, outputTokens))
}

// EstimateMicros is EstimatePico in micro-USD, rounded up.
func (p Price) EstimateMicros(promptTokens, outputTokens int64) int64 {
	return picoToMicrosCeil(p.EstimatePico(promptTokens, outputTokens))
}

// picoPerToken converts USD per million tokens to pico-USD per token (the
// same number scaled by 1e6). Prices are validated finite, non-negative and at
// most maxPrice at load, so this neither overflows nor goes negative;
// precision below 1e-6 USD per million tokens is rounded away.
func picoPerToken(usdPerMillion float64) int64 {
	if !(usdPerMillion > 0) {
		return 0
	}
	return int64(math.Round(usdPerMillion * 1e6))
}

func picoToUSD(pico int64) float64 { return float64(pico) / 1e12 }

func picoToMicrosCeil(pico int64) int64 {
	if pico <= 0 {
		return 0
	}
	return pico/picoPerMicro + boolInt(pico%picoPerMicro != 0)
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
