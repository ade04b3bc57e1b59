package admission

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string // field paths, in order; none: valid
	}{
		{name: "empty", cfg: Config{}},
		{name: "complete", cfg: Config{
			InputWeight: 1, OutputWeight: 3,
			Targets: map[string]Capacity{"a": {MaxConcurrent: 8}, "b": {MaxTokensInFlight: 1000}, "c": {MaxConcurrent: 1, MaxTokensInFlight: 1}},
			Classes: map[string]Class{"standard": {ReservedShare: 0.5, MaxQueuedWork: 1e6},
				"priority": {ReservedShare: 0.5, MaxShare: 0.8, DefaultDeadline: time.Second, MaxDeadline: 2 * time.Second}},
			Weights: map[string]float64{"x": 0.5, "y": 4},
		}},
		{name: "negative and empty capacities", cfg: Config{Targets: map[string]Capacity{
			"a": {MaxConcurrent: -1}, "b": {MaxTokensInFlight: -1}, "c": {}}},
			want: []string{"targets.a.maxConcurrent", "targets.b.maxTokensInFlight", "targets.c"}},
		{name: "bad weights", cfg: Config{InputWeight: -1, OutputWeight: math.Inf(1),
			Weights: map[string]float64{"x": 0, "y": math.NaN(), "z": -2}},
			want: []string{"inputWeight", "outputWeight", "weights.x", "weights.y", "weights.z"}},
		{name: "shares", cfg: Config{Classes: map[string]Class{
			"a": {ReservedShare: 0.7}, "b": {ReservedShare: 0.6}, "c": {ReservedShare: 1.5}, "d": {ReservedShare: math.NaN()},
			"e": {ReservedShare: 0.1, MaxShare: 0.05 / 10}, "f": {MaxShare: 2}}},
			want: []string{"classes.c.reservedShare", "classes.d.reservedShare", "classes.e.maxShare", "classes.f.maxShare", "classes"}},
		{name: "deadlines and queue bounds", cfg: Config{Classes: map[string]Class{
			"a": {DefaultDeadline: -1}, "b": {MaxDeadline: -1}, "c": {DefaultDeadline: 3 * time.Second, MaxDeadline: time.Second},
			"d": {MaxQueuedWork: -1}, "e": {MaxQueuedWork: math.Inf(1)}}},
			want: []string{"classes.a.defaultDeadline", "classes.b.maxDeadline", "classes.c.defaultDeadline", "classes.d.maxQueuedWork", "classes.e.maxQueuedWork"}},
		{name: "burst headroom", cfg: Config{Classes: map[string]Class{
			"a": {BurstHeadroom: 0.05}, "b": {BurstHeadroom: -0.1}, "c": {BurstHeadroom: 1}, "d": {BurstHeadroom: math.NaN()}}},
			want: []string{"classes.b.burstHeadroom", "classes.c.burstHeadroom", "classes.d.burstHeadroom"}},
		{name: "unnamed class", cfg: Config{Classes: map[string]Class{"": {}}}, want: []string{"classes"}},
		{name: "granted classes", cfg: Config{Classes: map[string]Class{"priority": {}},
			AppClasses: map[string]string{"a": "priority", "b": DefaultClass, "c": "gold", "d": ""}},
			want: []string{"appClasses.c", "appClasses.d"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				if _, err := New(tc.cfg, Options{}); err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			var ce ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Validate = %v; want a ConfigError", err)
			}
			var got []string
			for _, fe := range ce {
				got = append(got, fe.Field)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("fields %v; want %v (%v)", got, tc.want, err)
			}
			if _, err := New(tc.cfg, Options{}); err == nil {
				t.Fatal("New accepted an invalid configuration")
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	set, err := compile(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if set.wIn != 1 || set.wOut != 2 {
		t.Fatalf("weights %v, %v; want 1, 2", set.wIn, set.wOut)
	}
	if cl, ok := set.classes[DefaultClass]; !ok || cl.MaxShare != 1 {
		t.Fatalf("default class %+v %v", cl, ok)
	}
	if set.weight("anyone") != 1 {
		t.Fatal("default application weight is not 1")
	}
}
