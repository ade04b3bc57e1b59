// Package promreg registers Prometheus collectors that are built again on
// every reload (policy chains, stores), so that each series keeps one
// collector for the life of the process.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Reuse registers c on reg, or returns the collector of the same type
// already registered under c's descriptor. With a nil reg it returns c
// unregistered. When a collector of another type holds the descriptor, it
// returns c unregistered and the registry's error.
func Reuse[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}
