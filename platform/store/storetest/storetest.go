// Package storetest runs tests against every engine of the platform store.
package storetest

import (
	"context"
	"path/filepath"
	"testing"

	"sluice/internal/pgtest"
	"sluice/platform/store"
)

// Engines runs fn once per engine ("sqlite", "postgres") with a fresh,
// migrated store, closed when the subtest ends. PostgreSQL is a private
// cluster (or PG_URL's server), one database per subtest.
func Engines(t *testing.T, fn func(t *testing.T, s store.Store)) {
	t.Helper()
	pg := pgtest.Start(t)
	for _, e := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "data", store.SQLiteFile) }},
		{"postgres", func(t *testing.T) string { return pg.NewDatabase(t) }},
	} {
		t.Run(e.name, func(t *testing.T) {
			s, err := store.Open(context.Background(), e.dsn(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if s.Dialect() != e.name {
				t.Fatalf("dialect %q, want %q", s.Dialect(), e.name)
			}
			fn(t, s)
		})
	}
}
