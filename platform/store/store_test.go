package store_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"sluice/platform/store"
	"sluice/platform/store/storetest"
)

// engines runs fn once per engine with a fresh, migrated store.
func engines(t *testing.T, fn func(t *testing.T, s store.Store)) {
	t.Helper()
	storetest.Engines(t, fn)
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)

func write(t *testing.T, s store.Store, fn func(ctx context.Context, tx store.Tx) error) {
	t.Helper()
	ctx := context.Background()
	if err := s.Write(ctx, func(tx store.Tx) error { return fn(ctx, tx) }); err != nil {
		t.Fatal(err)
	}
}

func read[T any](t *testing.T, s store.Store, fn func(ctx context.Context, tx store.Tx) (T, error)) T {
	t.Helper()
	ctx := context.Background()
	var out T
	if err := s.Read(ctx, func(tx store.Tx) error {
		var err error
		out, err = fn(ctx, tx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func provider(id, name string) store.Provider {
	return store.Provider{ID: id, Name: name, Type: "openai", URL: "http://127.0.0.1:9", Targets: []string{},
		AuthHeader: "", APIKeySealed: []byte{1, 2, 0, 255}, CreatedAt: t0, UpdatedAt: t0}
}

func TestMigrationsReapplyCleanly(t *testing.T) {
	dir := t.TempDir()
	for range 2 {
		s, err := store.Open(context.Background(), filepath.Join(dir, store.SQLiteFile), nil)
		if err != nil {
			t.Fatal(err)
		}
		v := read(t, s, func(ctx context.Context, tx store.Tx) (int64, error) { return tx.Version(ctx) })
		if v != 1 {
			t.Fatalf("version %d after open, want 1", v)
		}
		s.Close()
	}
}

func TestProviders(t *testing.T) {
	engines(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		p := provider("p1", "openai")
		p.Targets = []string{"http://a", "http://b"}
		write(t, s, func(ctx context.Context, tx store.Tx) error { return tx.InsertProvider(ctx, p) })
		got := read(t, s, func(ctx context.Context, tx store.Tx) (store.Provider, error) { return tx.GetProvider(ctx, "p1") })
		if !reflect.DeepEqual(got, p) {
			t.Fatalf("read back\n%+v\nwant\n%+v", got, p)
		}
		err := s.Write(ctx, func(tx store.Tx) error { return tx.InsertProvider(ctx, provider("p2", "openai")) })
		if !errors.Is(err, store.ErrConflict) {
			t.Fatalf("duplicate name: %v, want ErrConflict", err)
		}
		p.Name, p.APIKeySealed, p.UpdatedAt = "renamed", nil, t0.Add(time.Hour)
		write(t, s, func(ctx context.Context, tx store.Tx) error { return tx.UpdateProvider(ctx, p) })
		got = read(t, s, func(ctx context.Context, tx store.Tx) (store.Provider, error) { return tx.GetProvider(ctx, "p1") })
		if got.Name != "renamed" || got.APIKeySealed != nil || !got.UpdatedAt.Equal(p.UpdatedAt) {
			t.Fatalf("after update: %+v", got)
		}
		if err := s.Write(ctx, func(tx store.Tx) error { return tx.UpdateProvider(ctx, provider("nope", "x")) }); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("update of a missing provider: %v", err)
		}
		if err := s.Read(ctx, func(tx store.Tx) error { _, err := tx.GetProvider(ctx, "nope"); return err }); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get of a missing provider: %v", err)
		}
	})
}

func TestRateLimitRevisions(t *testing.T) {
	engines(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		write(t, s, func(ctx context.Context, tx store.Tx) error { return tx.InsertProvider(ctx, provider("p1", "a")) })
		var rev int64
		write(t, s, func(ctx context.Context, tx store.Tx) (err error) {
			rev, err = tx.SetRateLimits(ctx, "p1", []byte(`{"backend":{}}`), 0, t0)
			return err
		})
		if rev != 1 {
			t.Fatalf("first revision %d, want 1", rev)
		}
		err := s.Write(ctx, func(tx store.Tx) error {
			_, err := tx.SetRateLimits(ctx, "p1", []byte(`{"lost":true}`), 0, t0)
			return err
		})
		if !errors.Is(err, store.ErrStale) {
			t.Fatalf("stale revision: %v, want ErrStale", err)
		}
		err = s.Write(ctx, func(tx store.Tx) error {
			_, err := tx.SetRateLimits(ctx, "missing", nil, 0, t0)
			return err
		})
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("missing provider: %v, want ErrNotFound", err)
		}
		got := read(t, s, func(ctx context.Context, tx store.Tx) (store.Provider, error) { return tx.GetProvider(ctx, "p1") })
		if string(got.RateLimits) != `{"backend":{}}` || got.RateLimitsRev != 1 {
			t.Fatalf("settings %s rev %d", got.RateLimits, got.RateLimitsRev)
		}
		if r, err := bump(s, "p1", 0); err != nil || r != 1 {
			t.Fatalf("guardrails rev %d %v", r, err)
		}
		if _, err := bump(s, "p1", 0); !errors.Is(err, store.ErrStale) {
			t.Fatalf("stale guardrails rev: %v", err)
		}
		if r, err := bump(s, "p1", -1); err != nil || r != 2 {
			t.Fatalf("unconditional bump %d %v", r, err)
		}
	})
}

func bump(s store.Store, id string, ifRev int64) (int64, error) {
	var r int64
	err := s.Write(context.Background(), func(tx store.Tx) (err error) {
		r, err = tx.BumpGuardrailsRev(context.Background(), id, ifRev)
		return err
	})
	return r, err
}

// A failed Write leaves nothing behind, even rows written before the error.
func TestWriteIsAllOrNothing(t *testing.T) {
	engines(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		boom := errors.New("boom")
		err := s.Write(ctx, func(tx store.Tx) error {
			if _, err := tx.BumpVersion(ctx); err != nil {
				return err
			}
			if err := tx.InsertProvider(ctx, provider("p1", "a")); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("err %v", err)
		}
		// An application granted a missing provider fails inside the store;
		// its row must not survive.
		err = s.Write(ctx, func(tx store.Tx) error {
			return tx.InsertApplication(ctx, store.Application{ID: "a1", Name: "A", Providers: []string{"missing"}, CreatedAt: t0, UpdatedAt: t0})
		})
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("grant of a missing provider: %v", err)
		}
		v := read(t, s, func(ctx context.Context, tx store.Tx) (int64, error) { return tx.Version(ctx) })
		ps := read(t, s, func(ctx context.Context, tx store.Tx) ([]store.Provider, error) { return tx.ListProviders(ctx) })
		as := read(t, s, func(ctx context.Context, tx store.Tx) ([]store.Application, error) { return tx.ListApplications(ctx) })
		if v != 1 || len(ps) != 0 || len(as) != 0 {
			t.Fatalf("after rollback: version %d, %d providers, %d applications", v, len(ps), len(as))
		}
	})
}

func TestApplicationsKeysAndCascade(t *testing.T) {
	engines(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		exp := t0.Add(time.Hour)
		write(t, s, func(ctx context.Context, tx store.Tx) error {
			for _, p := range []store.Provider{provider("p1", "a"), provider("p2", "b")} {
				if err := tx.InsertProvider(ctx, p); err != nil {
					return err
				}
			}
			if err := tx.InsertApplication(ctx, store.Application{ID: "a1", Name: "A", Providers: []string{"p2", "p1", "p2"}, CreatedAt: t0, UpdatedAt: t0}); err != nil {
				return err
			}
			for _, k := range []store.APIKey{
				{ID: "k1", ApplicationID: "a1", Prefix: "sk-1", Hash: "sha256:1", CreatedAt: t0},
				{ID: "k2", ApplicationID: "a1", Prefix: "sk-2", Hash: "sha256:2", CreatedAt: t0.Add(time.Second), ExpiresAt: &exp},
				{ID: "k3", ApplicationID: "a1", Prefix: "sk-3", Hash: "sha256:3", CreatedAt: t0.Add(2 * time.Second)},
			} {
				if err := tx.InsertKey(ctx, k); err != nil {
					return err
				}
			}
			return tx.RevokeKey(ctx, "a1", "k3", t0)
		})
		a := read(t, s, func(ctx context.Context, tx store.Tx) (store.Application, error) { return tx.GetApplication(ctx, "a1") })
		if !reflect.DeepEqual(a.Providers, []string{"p1", "p2"}) {
			t.Fatalf("grants %v", a.Providers)
		}
		err := s.Write(ctx, func(tx store.Tx) error {
			return tx.InsertKey(ctx, store.APIKey{ID: "k4", ApplicationID: "a1", Hash: "sha256:1", CreatedAt: t0})
		})
		if !errors.Is(err, store.ErrConflict) {
			t.Fatalf("duplicate key hash: %v", err)
		}
		usable := func(now time.Time) []string {
			ks := read(t, s, func(ctx context.Context, tx store.Tx) ([]store.APIKey, error) { return tx.ListUsableKeys(ctx, now) })
			var ids []string
			for _, k := range ks {
				ids = append(ids, k.ID)
			}
			return ids
		}
		if got := usable(t0); !reflect.DeepEqual(got, []string{"k1", "k2"}) {
			t.Fatalf("usable keys now %v", got)
		}
		if got := usable(exp); !reflect.DeepEqual(got, []string{"k1"}) {
			t.Fatalf("usable keys at expiry %v", got)
		}
		later, earlier := t0.Add(time.Minute), t0.Add(time.Second)
		write(t, s, func(ctx context.Context, tx store.Tx) error {
			return tx.TouchKeys(ctx, map[string]time.Time{"k1": later, "unknown": later})
		})
		write(t, s, func(ctx context.Context, tx store.Tx) error {
			return tx.TouchKeys(ctx, map[string]time.Time{"k1": earlier})
		})
		k := read(t, s, func(ctx context.Context, tx store.Tx) (store.APIKey, error) { return tx.GetKey(ctx, "a1", "k1") })
		if k.LastUsedAt == nil || !k.LastUsedAt.Equal(later) {
			t.Fatalf("last used %v, want %v (never lowered)", k.LastUsedAt, later)
		}
		if err := s.Write(ctx, func(tx store.Tx) error { return tx.RevokeKey(ctx, "other-app", "k1", t0) }); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("revoke through another application: %v", err)
		}
		// Deleting a provider removes its grants; deleting the application its keys.
		write(t, s, func(ctx context.Context, tx store.Tx) error { return tx.DeleteProvider(ctx, "p2") })
		a = read(t, s, func(ctx context.Context, tx store.Tx) (store.Application, error) { return tx.GetApplication(ctx, "a1") })
		if !reflect.DeepEqual(a.Providers, []string{"p1"}) {
			t.Fatalf("grants after provider delete %v", a.Providers)
		}
		write(t, s, func(ctx context.Context, tx store.Tx) error { return tx.DeleteApplication(ctx, "a1") })
		if ks := read(t, s, func(ctx context.Context, tx store.Tx) ([]store.APIKey, error) { return tx.ListKeys(ctx, "a1") }); len(ks) != 0 {
			t.Fatalf("keys of a deleted application: %v", ks)
		}
	})
}

func TestGuardrails(t *testing.T) {
	engines(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		write(t, s, func(ctx context.Context, tx store.Tx) error {
			if err := tx.InsertProvider(ctx, provider("p1", "a")); err != nil {
				return err
			}
			for i, id := range []string{"g1", "g2", "g3"} {
				g := store.Guardrail{ID: id, ProviderID: "p1", Position: i, Name: "model-access", Version: "v1",
					Params: []byte(`{"allow":["*"]}`), Rev: 1, CreatedAt: t0, UpdatedAt: t0}
				if err := tx.InsertGuardrail(ctx, g); err != nil {
					return err
				}
			}
			return nil
		})
		ids := func() []string {
			gs := read(t, s, func(ctx context.Context, tx store.Tx) ([]store.Guardrail, error) { return tx.ListGuardrails(ctx, "p1") })
			var out []string
			for _, g := range gs {
				out = append(out, g.ID)
			}
			return out
		}
		write(t, s, func(ctx context.Context, tx store.Tx) error {
			return tx.SetGuardrailPositions(ctx, "p1", []string{"g3", "g1", "g2"})
		})
		if got := ids(); !reflect.DeepEqual(got, []string{"g3", "g1", "g2"}) {
			t.Fatalf("order %v", got)
		}
		for _, bad := range [][]string{{"g1", "g2"}, {"g1", "g1", "g2"}, {"g1", "g2", "gx"}} {
			if err := s.Write(ctx, func(tx store.Tx) error { return tx.SetGuardrailPositions(ctx, "p1", bad) }); !errors.Is(err, store.ErrConflict) {
				t.Fatalf("reorder %v: %v", bad, err)
			}
		}
		g := read(t, s, func(ctx context.Context, tx store.Tx) (store.Guardrail, error) {
			return tx.GetGuardrail(ctx, "p1", "g1")
		})
		g.Params = []byte(`{"allow":["gpt-4o"]}`)
		var rev int64
		write(t, s, func(ctx context.Context, tx store.Tx) (err error) {
			rev, err = tx.UpdateGuardrail(ctx, g, 1)
			return err
		})
		if rev != 2 {
			t.Fatalf("rev %d", rev)
		}
		if err := s.Write(ctx, func(tx store.Tx) error { _, err := tx.UpdateGuardrail(ctx, g, 1); return err }); !errors.Is(err, store.ErrStale) {
			t.Fatalf("stale update: %v", err)
		}
		write(t, s, func(ctx context.Context, tx store.Tx) error { return tx.DeleteGuardrail(ctx, "p1", "g1") })
		if got := ids(); !reflect.DeepEqual(got, []string{"g3", "g2"}) {
			t.Fatalf("after delete %v", got)
		}
	})
}

func TestGatewaysTokensAndAudit(t *testing.T) {
	engines(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		write(t, s, func(ctx context.Context, tx store.Tx) error {
			if err := tx.InsertGateway(ctx, store.Gateway{ID: "gw1", Name: "edge", TokenHash: "sha256:t", CreatedAt: t0}); err != nil {
				return err
			}
			if err := tx.InsertGateway(ctx, store.Gateway{ID: "local", Name: "in-process", CreatedAt: t0}); err != nil {
				return err
			}
			if err := tx.InsertGateway(ctx, store.Gateway{ID: "local2", Name: "another without token", CreatedAt: t0}); err != nil {
				return err
			}
			return tx.InsertAdminToken(ctx, store.AdminToken{ID: "adm", Name: "first", Hash: "sha256:a", CreatedAt: t0})
		})
		g := read(t, s, func(ctx context.Context, tx store.Tx) (store.Gateway, error) {
			return tx.GatewayByTokenHash(ctx, "sha256:t")
		})
		if g.ID != "gw1" {
			t.Fatalf("by token: %+v", g)
		}
		if err := s.Read(ctx, func(tx store.Tx) error { _, err := tx.GatewayByTokenHash(ctx, ""); return err }); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("empty token hash must match nothing: %v", err)
		}
		write(t, s, func(ctx context.Context, tx store.Tx) error {
			return tx.ReportGateway(ctx, "gw1", store.Report{Version: 5, Result: "applied", At: t0})
		})
		write(t, s, func(ctx context.Context, tx store.Tx) error {
			return tx.ReportGateway(ctx, "gw1", store.Report{Version: 6, Result: "failed", Error: "bad", At: t0.Add(time.Second)})
		})
		g = read(t, s, func(ctx context.Context, tx store.Tx) (store.Gateway, error) { return tx.GetGateway(ctx, "gw1") })
		if g.AppliedVersion != 5 || g.LastVersion != 6 || g.LastResult != "failed" || g.LastError != "bad" || !g.AppliedAt.Equal(t0) {
			t.Fatalf("after reports: %+v", g)
		}
		write(t, s, func(ctx context.Context, tx store.Tx) error { return tx.RevokeGateway(ctx, "gw1", t0) })
		g = read(t, s, func(ctx context.Context, tx store.Tx) (store.Gateway, error) { return tx.GetGateway(ctx, "gw1") })
		if g.RevokedAt == nil {
			t.Fatal("not revoked")
		}

		write(t, s, func(ctx context.Context, tx store.Tx) error {
			return tx.SetAdminTokenHash(ctx, store.AdminToken{ID: "env", Name: "SLUICE_ADMIN_TOKEN", Hash: "sha256:e1", CreatedAt: t0})
		})
		write(t, s, func(ctx context.Context, tx store.Tx) error {
			return tx.SetAdminTokenHash(ctx, store.AdminToken{ID: "env", Name: "SLUICE_ADMIN_TOKEN", Hash: "sha256:e2", CreatedAt: t0})
		})
		if n := read(t, s, func(ctx context.Context, tx store.Tx) (int, error) { return tx.CountAdminTokens(ctx) }); n != 2 {
			t.Fatalf("%d admin tokens", n)
		}
		if err := s.Read(ctx, func(tx store.Tx) error { _, err := tx.AdminTokenByHash(ctx, "sha256:e1"); return err }); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the replaced env token still authenticates: %v", err)
		}

		write(t, s, func(ctx context.Context, tx store.Tx) error {
			for i := range 5 {
				var before []byte
				if i > 0 {
					before = []byte(`{"n":` + string(rune('0'+i-1)) + `}`)
				}
				if _, err := tx.InsertAudit(ctx, store.AuditEntry{At: t0.Add(time.Duration(i) * time.Second), TokenID: "adm",
					Action: "provider.update", ResourceType: "provider", ResourceID: "p1", Before: before, After: []byte(`{"n":` + string(rune('0'+i)) + `}`)}); err != nil {
					return err
				}
			}
			return nil
		})
		page := read(t, s, func(ctx context.Context, tx store.Tx) ([]store.AuditEntry, error) { return tx.ListAudit(ctx, 0, 2) })
		if len(page) != 2 || string(page[0].After) != `{"n":4}` || string(page[1].After) != `{"n":3}` {
			t.Fatalf("first page %+v", page)
		}
		page = read(t, s, func(ctx context.Context, tx store.Tx) ([]store.AuditEntry, error) {
			return tx.ListAudit(ctx, page[1].ID, 10)
		})
		if len(page) != 3 || page[2].Before != nil || string(page[2].After) != `{"n":0}` {
			t.Fatalf("second page %+v", page)
		}
	})
}

// Concurrent conditional updates of one revision: exactly one wins.
func TestConcurrentRevisionOneWinner(t *testing.T) {
	engines(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		write(t, s, func(ctx context.Context, tx store.Tx) error { return tx.InsertProvider(ctx, provider("p1", "a")) })
		const n = 8
		errs := make(chan error, n)
		for i := range n {
			go func() {
				errs <- s.Write(ctx, func(tx store.Tx) error {
					if _, err := tx.BumpVersion(ctx); err != nil {
						return err
					}
					_, err := tx.SetRateLimits(ctx, "p1", []byte(`{"writer":`+string(rune('0'+i))+`}`), 0, t0)
					return err
				})
			}()
		}
		won, stale := 0, 0
		for range n {
			switch err := <-errs; {
			case err == nil:
				won++
			case errors.Is(err, store.ErrStale):
				stale++
			default:
				t.Fatalf("unexpected error: %v", err)
			}
		}
		v := read(t, s, func(ctx context.Context, tx store.Tx) (int64, error) { return tx.Version(ctx) })
		if won != 1 || stale != n-1 || v != 2 {
			t.Fatalf("%d won, %d stale, version %d; want 1, %d, 2 (the losers' version bumps rolled back)", won, stale, v, n-1)
		}
	})
}

// The counters setting is opaque bytes: absent at first, replaced, cleared;
// a rolled-back write leaves it as it was.
func TestCountersSetting(t *testing.T) {
	engines(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		get := func() []byte {
			return read(t, s, func(ctx context.Context, tx store.Tx) ([]byte, error) { return tx.Counters(ctx) })
		}
		if b := get(); b != nil {
			t.Fatalf("fresh store: %x, want nil", b)
		}
		sealed := []byte{0, 1, 2, 255}
		write(t, s, func(ctx context.Context, tx store.Tx) error { return tx.SetCounters(ctx, sealed) })
		if b := get(); !bytes.Equal(b, sealed) {
			t.Fatalf("read back %x, want %x", b, sealed)
		}
		boom := errors.New("boom")
		if err := s.Write(ctx, func(tx store.Tx) error {
			if err := tx.SetCounters(ctx, []byte{9}); err != nil {
				return err
			}
			return boom
		}); !errors.Is(err, boom) {
			t.Fatal(err)
		}
		if b := get(); !bytes.Equal(b, sealed) {
			t.Fatalf("after a rollback %x, want %x", b, sealed)
		}
		write(t, s, func(ctx context.Context, tx store.Tx) error { return tx.SetCounters(ctx, nil) })
		if b := get(); b != nil {
			t.Fatalf("cleared: %x, want nil", b)
		}
	})
}
