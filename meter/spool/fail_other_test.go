//go:build !linux

package spool

import (
	"testing"

	"sluice/meter/metertest"
)

// failAppends makes the spool's writes fail (a read-only handle on the
// active segment) until the test ends.
func failAppends(t testing.TB, s *Spool) {
	t.Helper()
	metertest.FailWrites(t, &s.mu, &s.f)
}
