package fairbench

import (
	"context"
	"strings"
	"testing"
	"time"

	"sluice/deployment/yamlfile"
	"sluice/mockllm"
	"sluice/policies"
	"sluice/policies/builtin"
)

// TestDeploymentDoc: every mode's deployment loads and its chains build.
func TestDeploymentDoc(t *testing.T) {
	capy, err := mockllm.ParseCapacity(DefaultCapacity)
	if err != nil {
		t.Fatal(err)
	}
	tenants := make([]*tenant, 20)
	for i := range tenants {
		tenants[i] = &tenant{idx: i, id: tenantID(i), role: []int{roleHot, rolePriority, roleVictim}[min(i, 2)]}
	}
	for _, mode := range []string{ModeFIFO, ModeRPM, ModeFair} {
		doc := deploymentDoc(mode, "http://127.0.0.1:9", capy, tenants, 0.05)
		d, err := yamlfile.ParseRendered([]byte(doc), mode+".yaml")
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, doc)
		}
		if err := policies.Check(d, builtin.Registry()); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if mode == ModeFair && d.Admission.Classes["standard"].BurstHeadroom != 0.05 {
			t.Errorf("fair: the standard class's burstHeadroom %v; want 0.05", d.Admission.Classes["standard"].BurstHeadroom)
		}
		if got := strings.Contains(doc, "fair-admission"); got != (mode == ModeFair) {
			t.Errorf("%s: fair-admission in the chain: %v", mode, got)
		}
		if got := strings.Contains(doc, "basic-ratelimit"); got != (mode == ModeRPM) {
			t.Errorf("%s: basic-ratelimit in the chain: %v", mode, got)
		}
	}
	if n := rpmLimit(capy, 200); n != 20 {
		t.Errorf("rpm limit %d; want 20 (128 sequences over 1.92 s, over 200 tenants, per minute)", n)
	}
}

func TestPercentiles(t *testing.T) {
	var xs []float64
	for i := 1; i <= 100; i++ {
		xs = append(xs, float64(101-i))
	}
	p := percentiles(xs)
	if p.N != 100 || p.P50 != 51 || p.P99 != 100 || p.Max != 100 {
		t.Fatalf("%+v", p)
	}
	if (percentiles(nil) != Percentiles{}) {
		t.Fatal("empty sample")
	}
}

func TestRunRefuses(t *testing.T) {
	for _, o := range []Options{
		{Tenants: 200, Duration: time.Minute, Mode: "lottery", Out: t.TempDir()},
		{Tenants: 5, Duration: time.Minute, Mode: ModeFair, Out: t.TempDir()},
		{Tenants: 200, Duration: time.Second, Mode: ModeFair, Out: t.TempDir()},
		{Tenants: 200, Duration: time.Minute, Mode: ModeFair, Out: t.TempDir(), Capacity: "sequences=4,decode=0"},
	} {
		if err := Run(context.Background(), o); err == nil {
			t.Errorf("%+v: accepted", o)
		}
	}
}
