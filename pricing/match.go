package pricing

import "strings"

// Name matching. A request names a model in many spellings: "gpt-4o",
// "openai/gpt-4o", "gpt-4o-2024-08-06", "models/gemini-2.5-pro",
// "us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-3-5-haiku@20241022".
// find tries, in order, stopping at the first hit (a model name first, then an
// alias, at every step):
//
//  1. the name as given;
//  2. lower-cased and trimmed;
//  3. with a path prefix removed (everything up to the last "/": "openai/",
//     "models/", "accounts/<id>/models/", "meta-llama/");
//  4. with a Bedrock region and vendor prefix removed ("us.", "eu.", "apac.",
//     "global." then "anthropic.", "meta.", "mistral." ...);
//  5. with one version suffix after another removed, retrying after each.
//
// Suffixes are removed only when they look like dates or snapshot versions, so
// an unknown newer model ("claude-opus-4-7") is never priced as an older one.

var (
	bedrockRegions = []string{"us.", "eu.", "apac.", "ap.", "ca.", "jp.", "au.", "global.", "us-gov."}
	bedrockVendors = []string{"anthropic.", "meta.", "mistral.", "amazon.", "cohere.", "ai21.", "deepseek.", "openai.", "google.", "qwen.", "writer."}
	// suffixShapes are tried in order after the Bedrock "-v1:0" form; the first
	// that matches is removed. '#' stands for one ASCII digit.
	suffixShapes = []string{
		"-####-##-##", // OpenAI "-2024-08-06"
		"-########",   // Anthropic "-20241022"
		"@########",   // Vertex "@20241022"
		"-latest",
		"-preview-##-##", // Gemini "-preview-05-20"
		"-preview",
		"-exp-##-##",
		"-exp-####",
		"-exp",
		"-###",  // Gemini "-001"
		"-####", // OpenAI "-0125", Mistral "-2411"
	}
)

// cutPrefixAny removes the first of prefixes that s starts with.
func cutPrefixAny(s string, prefixes []string) (string, bool) {
	for _, p := range prefixes {
		if rest, ok := strings.CutPrefix(s, p); ok {
			return rest, true
		}
	}
	return s, false
}

// cutShape removes a suffix of the given shape, leaving a non-empty rest.
func cutShape(s, shape string) (string, bool) {
	n := len(s) - len(shape)
	if n <= 0 {
		return s, false
	}
	for i := 0; i < len(shape); i++ {
		c := s[n+i]
		if shape[i] == '#' {
			if c < '0' || c > '9' {
				return s, false
			}
		} else if c != shape[i] {
			return s, false
		}
	}
	return s[:n], true
}

// cutBedrockVersion removes a "-v<digits>:<digits>" suffix.
func cutBedrockVersion(s string) (string, bool) {
	colon := strings.LastIndexByte(s, ':')
	if colon < 0 || !allDigits(s[colon+1:]) {
		return s, false
	}
	v := strings.LastIndex(s[:colon], "-v")
	if v <= 0 || !allDigits(s[v+2:colon]) {
		return s, false
	}
	return s[:v], true
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// cutVersionSuffix removes one version suffix.
func cutVersionSuffix(s string) (string, bool) {
	if rest, ok := cutBedrockVersion(s); ok {
		return rest, true
	}
	for _, shape := range suffixShapes {
		if rest, ok := cutShape(s, shape); ok {
			return rest, true
		}
	}
	return s, false
}

func (c *Catalog) find(model string) *entry {
	if e := c.get(model); e != nil {
		return e
	}
	s := canonical(model)
	if s == "" {
		return nil
	}
	if e := c.get(s); e != nil {
		return e
	}
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		s = s[i+1:]
		if e := c.get(s); e != nil {
			return e
		}
	}
	if rest, ok := cutPrefixAny(s, bedrockRegions); ok {
		if _, vendor := cutPrefixAny(rest, bedrockVendors); vendor {
			s = rest
		}
	}
	if rest, ok := cutPrefixAny(s, bedrockVendors); ok {
		s = rest
		if e := c.get(s); e != nil {
			return e
		}
	}
	for {
		rest, ok := cutVersionSuffix(s)
		if !ok {
			return nil
		}
		s = rest
		if e := c.get(s); e != nil {
			return e
		}
	}
}

func (c *Catalog) get(name string) *entry {
	if e, ok := c.models[name]; ok {
		return e
	}
	return c.aliases[name]
}
