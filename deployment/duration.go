package deployment

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Duration is a positive duration written as a string: Go syntax ("90s",
// "1h30m") or whole days ("1d", "30d"). It is the one duration type of the
// document and of policy params (policies.Duration is this type); in a params
// JSON Schema it is a string matching DurationPattern.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats whole days as "Nd", anything else in Go syntax.
func (d Duration) String() string {
	const day = 24 * time.Hour
	if td := time.Duration(d); td > 0 && td%day == 0 {
		return strconv.FormatInt(int64(td/day), 10) + "d"
	}
	return time.Duration(d).String()
}

// UnmarshalText accepts what ParseDuration accepts. JSON strings decode
// through it too.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the String form, which UnmarshalText reads back. JSON
// encodes through it too.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalYAML lets goccy/go-yaml (and other decoders with this interface)
// read a Duration outside yamlfile, e.g. in a document that embeds one.
func (d *Duration) UnmarshalYAML(unmarshal func(any) error) error {
	var s string
	if err := unmarshal(&s); err != nil {
		return fmt.Errorf("expected a duration string like \"30s\": %w", err)
	}
	return d.UnmarshalText([]byte(s))
}

// MarshalYAML writes the String form.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// ParseDuration parses a Duration string: Go syntax or whole days; it must be
// positive.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, ok := strings.CutSuffix(s, "d"); ok && n != "" && !strings.ContainsAny(n, "hmsuµn") {
		days, err := strconv.Atoi(n)
		if err != nil || days <= 0 {
			return 0, fmt.Errorf("invalid duration %q: want a positive whole number of days like \"1d\"", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want Go syntax like \"1m\", \"1h\" or days like \"1d\"", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("invalid duration %q: must be positive", s)
	}
	return d, nil
}

// DurationPattern is the JSON Schema pattern of Duration strings. It admits a
// superset of what ParseDuration accepts ("0s" matches); ParseDuration has
// the last word.
const DurationPattern = `^([0-9]+d|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$`
