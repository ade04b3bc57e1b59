package config

import (
	"fmt"
	"strconv"
	"time"

	"sluice/policies"
)

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

// UnmarshalText accepts Go syntax ("90s", "1h30m") or whole days ("1d"); the
// value must be positive (policies.ParseDuration).
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := policies.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the String form, which UnmarshalText reads back.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalYAML lets goccy/go-yaml (and other decoders with this interface)
// read a Duration outside Load, e.g. in a document that embeds one.
func (d *Duration) UnmarshalYAML(unmarshal func(any) error) error {
	var s string
	if err := unmarshal(&s); err != nil {
		return fmt.Errorf("expected a duration string like \"30s\": %w", err)
	}
	return d.UnmarshalText([]byte(s))
}

// MarshalYAML writes the String form.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }
