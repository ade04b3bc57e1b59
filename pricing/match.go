package pricing

import (
	"regexp"
	"strings"
)

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
	bedrockRegion = regexp.MustCompile(`^(us|eu|apac|ap|ca|jp|au|global|us-gov)\.`)
	bedrockVendor = regexp.MustCompile(`^(anthropic|meta|mistral|amazon|cohere|ai21|deepseek|openai|google|qwen|writer)\.`)
	// versionSuffixes are tried in order; the first that matches is removed.
	versionSuffixes = []*regexp.Regexp{
		regexp.MustCompile(`-v\d+:\d+$`),               // Bedrock "-v1:0"
		regexp.MustCompile(`-\d{4}-\d{2}-\d{2}$`),      // OpenAI "-2024-08-06"
		regexp.MustCompile(`[-@]\d{8}$`),               // Anthropic "-20241022", Vertex "@20241022"
		regexp.MustCompile(`-latest$`),                 // "-latest"
		regexp.MustCompile(`-preview(-\d{2}-\d{2})?$`), // Gemini "-preview-05-20"
		regexp.MustCompile(`-exp(-\d{2}-\d{2}|-\d{4})?$`),
		regexp.MustCompile(`-\d{3}$`), // Gemini "-001"
		regexp.MustCompile(`-\d{4}$`), // OpenAI "-0125", Mistral "-2411"
	}
)

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
	if loc := bedrockRegion.FindStringIndex(s); loc != nil && bedrockVendor.MatchString(s[loc[1]:]) {
		s = s[loc[1]:]
	}
	if loc := bedrockVendor.FindStringIndex(s); loc != nil {
		s = s[loc[1]:]
		if e := c.get(s); e != nil {
			return e
		}
	}
	for {
		stripped := false
		for _, re := range versionSuffixes {
			if loc := re.FindStringIndex(s); loc != nil && loc[0] > 0 {
				s = s[:loc[0]]
				stripped = true
				break
			}
		}
		if !stripped {
			return nil
		}
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
