package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"sluice/deployment"
	"sluice/platform/store"
)

// KeyPrefix starts every API key the platform issues.
const KeyPrefix = "sk-sluice-"

// keyPrefixLen is how much of a key is kept to tell keys apart.
const keyPrefixLen = len(KeyPrefix) + 6

func toApplication(a store.Application) Application {
	ps := a.Providers
	if ps == nil {
		ps = []string{}
	}
	return Application{Id: a.ID, Name: a.Name, Providers: ps, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt}
}

func toKey(k store.APIKey) Key {
	return Key{Id: k.ID, Prefix: k.Prefix, CreatedAt: k.CreatedAt, ExpiresAt: timePtr(k.ExpiresAt),
		RevokedAt: timePtr(k.RevokedAt), LastUsedAt: timePtr(k.LastUsedAt)}
}

func (s *Server) ListApplications(c echo.Context) error {
	ctx := c.Request().Context()
	out := ApplicationList{Applications: []Application{}}
	err := s.store.Read(ctx, func(tx store.Tx) error {
		as, err := tx.ListApplications(ctx)
		for _, a := range as {
			out.Applications = append(out.Applications, toApplication(a))
		}
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) GetApplication(c echo.Context, id ApplicationId) error {
	ctx := c.Request().Context()
	var a store.Application
	err := s.store.Read(ctx, func(tx store.Tx) (err error) {
		a, err = tx.GetApplication(ctx, id)
		return err
	})
	if err != nil {
		return storeError(err, "application", id)
	}
	return c.JSON(http.StatusOK, toApplication(a))
}

// checkGrants reports every granted provider id that does not exist.
func checkGrants(ctx context.Context, tx store.Tx, ids []string) error {
	var ps []Problem
	for i, id := range ids {
		if _, err := tx.GetProvider(ctx, id); errors.Is(err, store.ErrNotFound) {
			ps = append(ps, problem(fmt.Sprintf("$.providers[%d]", i), "provider %q does not exist", id))
		} else if err != nil {
			return err
		}
	}
	if len(ps) > 0 {
		return invalid(ps)
	}
	return nil
}

func grants(in ApplicationInput) []string {
	if in.Providers == nil {
		return nil
	}
	return *in.Providers
}

func (s *Server) CreateApplication(c echo.Context) error {
	ctx := c.Request().Context()
	var in ApplicationInput
	if err := bind(c, &in); err != nil {
		return err
	}
	now := s.now()
	a := store.Application{ID: newID("app"), Name: in.Name, Providers: grants(in), CreatedAt: now, UpdatedAt: now}
	err := s.write(ctx, func(tx store.Tx) (int64, error) {
		if err := checkGrants(ctx, tx, a.Providers); err != nil {
			return 0, err
		}
		if err := tx.InsertApplication(ctx, a); err != nil {
			return 0, err
		}
		stored, err := tx.GetApplication(ctx, a.ID)
		if err != nil {
			return 0, err
		}
		a = stored
		v, err := tx.BumpVersion(ctx)
		if err != nil {
			return 0, err
		}
		return v, s.audit(ctx, c, tx, "application.create", "application", a.ID, nil, toApplication(a))
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, toApplication(a))
}

func (s *Server) UpdateApplication(c echo.Context, id ApplicationId) error {
	ctx := c.Request().Context()
	var in ApplicationInput
	if err := bind(c, &in); err != nil {
		return err
	}
	var a store.Application
	err := s.write(ctx, func(tx store.Tx) (int64, error) {
		old, err := tx.GetApplication(ctx, id)
		if err != nil {
			return 0, storeError(err, "application", id)
		}
		if err := checkGrants(ctx, tx, grants(in)); err != nil {
			return 0, err
		}
		a = old
		a.Name, a.Providers, a.UpdatedAt = in.Name, grants(in), s.now()
		if err := tx.UpdateApplication(ctx, a); err != nil {
			return 0, err
		}
		if a, err = tx.GetApplication(ctx, id); err != nil {
			return 0, err
		}
		v, err := tx.BumpVersion(ctx)
		if err != nil {
			return 0, err
		}
		return v, s.audit(ctx, c, tx, "application.update", "application", id, toApplication(old), toApplication(a))
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toApplication(a))
}

func (s *Server) DeleteApplication(c echo.Context, id ApplicationId) error {
	ctx := c.Request().Context()
	err := s.write(ctx, func(tx store.Tx) (int64, error) {
		old, err := tx.GetApplication(ctx, id)
		if err != nil {
			return 0, storeError(err, "application", id)
		}
		if err := tx.DeleteApplication(ctx, id); err != nil {
			return 0, err
		}
		v, err := tx.BumpVersion(ctx)
		if err != nil {
			return 0, err
		}
		return v, s.audit(ctx, c, tx, "application.delete", "application", id, toApplication(old), nil)
	})
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) ListKeys(c echo.Context, appID ApplicationId) error {
	ctx := c.Request().Context()
	out := KeyList{Keys: []Key{}}
	err := s.store.Read(ctx, func(tx store.Tx) error {
		if _, err := tx.GetApplication(ctx, appID); err != nil {
			return storeError(err, "application", appID)
		}
		ks, err := tx.ListKeys(ctx, appID)
		for _, k := range ks {
			out.Keys = append(out.Keys, toKey(k))
		}
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) CreateKey(c echo.Context, appID ApplicationId) error {
	ctx := c.Request().Context()
	var in KeyInput
	if err := bindOptional(c, &in); err != nil {
		return err
	}
	now := s.now()
	if in.ExpiresAt != nil && !in.ExpiresAt.After(now) {
		return invalid([]Problem{problem("$.expiresAt", "must be in the future")})
	}
	secret := newSecret(KeyPrefix)
	k := store.APIKey{ID: newID("key"), ApplicationID: appID, Prefix: secret[:keyPrefixLen],
		Hash: deployment.HashKey(secret), CreatedAt: now, ExpiresAt: timePtr(in.ExpiresAt)}
	err := s.write(ctx, func(tx store.Tx) (int64, error) {
		if _, err := tx.GetApplication(ctx, appID); err != nil {
			return 0, storeError(err, "application", appID)
		}
		if err := tx.InsertKey(ctx, k); err != nil {
			return 0, err
		}
		v, err := tx.BumpVersion(ctx)
		if err != nil {
			return 0, err
		}
		return v, s.audit(ctx, c, tx, "key.create", "key", k.ID, nil, toKey(k))
	})
	if err != nil {
		return err
	}
	kk := toKey(k)
	return c.JSON(http.StatusCreated, CreatedKey{Id: kk.Id, Prefix: kk.Prefix, CreatedAt: kk.CreatedAt, ExpiresAt: kk.ExpiresAt, Key: secret})
}

func (s *Server) RevokeKey(c echo.Context, appID ApplicationId, keyID string) error {
	ctx := c.Request().Context()
	err := s.write(ctx, func(tx store.Tx) (int64, error) {
		old, err := tx.GetKey(ctx, appID, keyID)
		if err != nil {
			return 0, storeError(err, "key", keyID)
		}
		if old.RevokedAt != nil {
			return 0, nil // already revoked: nothing changes
		}
		if err := tx.RevokeKey(ctx, appID, keyID, s.now()); err != nil {
			return 0, err
		}
		k, err := tx.GetKey(ctx, appID, keyID)
		if err != nil {
			return 0, err
		}
		v, err := tx.BumpVersion(ctx)
		if err != nil {
			return 0, err
		}
		return v, s.audit(ctx, c, tx, "key.revoke", "key", keyID, toKey(old), toKey(k))
	})
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
