package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestReuse(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "x_total", Help: "x"}
	first, err := Reuse(reg, prometheus.NewCounter(opts))
	if err != nil {
		t.Fatal(err)
	}
	// Built again (a reload): the registered one comes back.
	again, err := Reuse(reg, prometheus.NewCounter(opts))
	if err != nil || again != first {
		t.Fatalf("second registration: %v, same collector %v", err, again == first)
	}
	// Another type under the same name: an error, and c unregistered.
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x_total", Help: "x"})
	if got, err := Reuse(reg, g); err == nil || got != g {
		t.Fatalf("conflicting type: err %v", err)
	}
	// No registry: c itself.
	c := prometheus.NewCounter(opts)
	if got, err := Reuse(nil, c); err != nil || got != c {
		t.Fatalf("nil registry: %v", err)
	}
}
