package admissionconfig

import (
	"errors"
	"strings"
	"testing"
	"time"

	"sluice/admission"
	"sluice/deployment"
	"sluice/deployment/yamlfile"
)

const head = `apiVersion: sluice/v1
providers:
  - {name: vllm, type: openai, url: "http://127.0.0.1:9", capacity: {maxConcurrent: 64, maxTokensInFlight: 500000}}
  - {name: plain, type: openai, url: "http://127.0.0.1:9"}
applications:
  - {id: app-a, admission: {class: priority, weight: 2}}
  - {id: app-b}
  - {id: app-c, admission: {weight: 0.5}}
`

func TestFromDeployment(t *testing.T) {
	d, err := yamlfile.Parse([]byte(head+`admission:
  inputWeight: 1
  outputWeight: 3
  classes:
    standard: {maxQueuedWork: 4e5, defaultDeadline: 30s, maxDeadline: 120s, burstHeadroom: 0.05}
    priority: {reservedShare: 0.3, maxShare: 0.6, defaultDeadline: 2s, maxDeadline: 5s, maxQueuedWork: 50000}
`), "a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := FromDeployment(d)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Targets) != 1 || cfg.Targets["vllm"] != (admission.Capacity{MaxConcurrent: 64, MaxTokensInFlight: 500000}) {
		t.Errorf("targets %+v; want vllm only", cfg.Targets)
	}
	if cfg.InputWeight != 1 || cfg.OutputWeight != 3 {
		t.Errorf("weights %v %v", cfg.InputWeight, cfg.OutputWeight)
	}
	want := admission.Class{ReservedShare: 0.3, MaxShare: 0.6, DefaultDeadline: 2 * time.Second, MaxDeadline: 5 * time.Second, MaxQueuedWork: 50000}
	if cfg.Classes["priority"] != want || cfg.Classes["standard"].MaxQueuedWork != 4e5 || cfg.Classes["standard"].BurstHeadroom != 0.05 {
		t.Errorf("classes %+v", cfg.Classes)
	}
	if len(cfg.Weights) != 2 || cfg.Weights["app-a"] != 2 || cfg.Weights["app-c"] != 0.5 {
		t.Errorf("application weights %+v", cfg.Weights)
	}
	if len(cfg.AppClasses) != 1 || cfg.AppClasses["app-a"] != "priority" {
		t.Errorf("granted classes %+v", cfg.AppClasses)
	}
	// Without the section: defaults, and an application may be granted the
	// default class by name.
	d, err = yamlfile.Parse([]byte(strings.Replace(head, "class: priority", "class: standard", 1)), "b.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = FromDeployment(d); err != nil || len(cfg.Classes) != 0 || cfg.AppClasses["app-a"] != admission.DefaultClass {
		t.Fatalf("%+v %v", cfg, err)
	}
}

// TestFromDeploymentErrors: every problem is reported at its field in the
// document, with its line.
func TestFromDeploymentErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string // "line: field: message part"
	}{
		{
			name: "capacity without a bound and negative",
			doc: `apiVersion: sluice/v1
providers:
  - name: a
    type: openai
    url: "http://127.0.0.1:9"
    capacity: {}
  - name: b.x
    type: openai
    url: "http://127.0.0.1:9"
    capacity: {maxConcurrent: -1}
`,
			want: []string{"6: providers[0].capacity: give maxConcurrent", "10: providers[1].capacity.maxConcurrent: must not be negative"},
		},
		{
			name: "classes",
			doc: head + `admission:
  outputWeight: -2
  classes:
    priority: {reservedShare: 0.7, maxShare: 0.5}
    batch: {reservedShare: 0.6, defaultDeadline: 10s, maxDeadline: 5s}
    "bad.name": {}
`,
			want: []string{
				"10: admission.outputWeight: must be a positive number",
				"11: admission.classes: the reserved shares sum to 1.3",
				"12: admission.classes.priority.maxShare: must be at least reservedShare",
				"13: admission.classes.batch.defaultDeadline: must not exceed maxDeadline",
				"14: admission.classes.bad.name: invalid class name",
			},
		},
		{
			name: "applications",
			doc:  strings.Replace(head, "{id: app-b}", "{id: app-b, admission: {class: gold, weight: -1}}", 1),
			want: []string{
				"6: applications[0].admission.class: class \"priority\" is not configured (classes: standard)",
				"7: applications[1].admission.class: class \"gold\" is not configured",
				"7: applications[1].admission.weight: must be a positive number",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := yamlfile.Parse([]byte(tc.doc), "t.yaml")
			if err != nil {
				t.Fatal(err)
			}
			_, err = FromDeployment(d)
			var es deployment.Errors
			if !errors.As(err, &es) {
				t.Fatalf("FromDeployment = %v; want deployment.Errors", err)
			}
			if len(es) != len(tc.want) {
				t.Fatalf("%d problems; want %d:\n%v", len(es), len(tc.want), err)
			}
			for i, e := range es {
				got := strings.TrimPrefix(e.Error(), "t.yaml:")
				if !strings.HasPrefix(got, strings.SplitN(tc.want[i], ": ", 2)[0]+":") ||
					!strings.Contains(got, strings.SplitN(tc.want[i], ": ", 2)[1]) {
					t.Errorf("problem %d: %s\nwant %s", i, e, tc.want[i])
				}
			}
		})
	}
}
