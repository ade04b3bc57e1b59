package pgtest

import (
	"database/sql"
	"testing"
)

func TestNewDatabaseIsEmptyAndUsable(t *testing.T) {
	s := Start(t)
	a, b := s.NewDatabase(t), s.NewDatabase(t)
	if a == b {
		t.Fatalf("two databases share a URL: %s", a)
	}
	for _, u := range []string{a, b} {
		db, err := sql.Open("pgx", u)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("CREATE TABLE t (x int)"); err != nil {
			t.Fatalf("%s: %v", redact(u), err)
		}
		db.Close()
	}
}
