package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"sluice/platform/store"
)

func toGuardrail(g store.Guardrail) (Guardrail, error) {
	out := Guardrail{Id: g.ID, Name: g.Name, Version: g.Version, Position: g.Position, CreatedAt: g.CreatedAt, UpdatedAt: g.UpdatedAt,
		Params: map[string]any{}}
	if len(g.Params) > 0 {
		if err := json.Unmarshal(g.Params, &out.Params); err != nil {
			return out, err
		}
	}
	return out, nil
}

func (s *Server) listGuardrails(ctx context.Context, tx store.Tx, providerID string) (GuardrailList, int64, error) {
	p, err := tx.GetProvider(ctx, providerID)
	if err != nil {
		return GuardrailList{}, 0, storeError(err, "provider", providerID)
	}
	gs, err := tx.ListGuardrails(ctx, providerID)
	if err != nil {
		return GuardrailList{}, 0, err
	}
	out := GuardrailList{Guardrails: []Guardrail{}}
	for _, g := range gs {
		ag, err := toGuardrail(g)
		if err != nil {
			return out, 0, err
		}
		out.Guardrails = append(out.Guardrails, ag)
	}
	return out, p.GuardrailsRev, nil
}

func (s *Server) ListGuardrails(c echo.Context, providerID ProviderId) error {
	ctx := c.Request().Context()
	var (
		out GuardrailList
		rev int64
	)
	err := s.store.Read(ctx, func(tx store.Tx) (err error) {
		out, rev, err = s.listGuardrails(ctx, tx, providerID)
		return err
	})
	if err != nil {
		return err
	}
	c.Response().Header().Set("ETag", etag(rev))
	return c.JSON(http.StatusOK, out)
}

func (s *Server) GetGuardrail(c echo.Context, providerID ProviderId, id string) error {
	ctx := c.Request().Context()
	var g store.Guardrail
	err := s.store.Read(ctx, func(tx store.Tx) (err error) {
		g, err = tx.GetGuardrail(ctx, providerID, id)
		return err
	})
	if err != nil {
		return storeError(err, "guardrail", id)
	}
	out, err := toGuardrail(g)
	if err != nil {
		return err
	}
	c.Response().Header().Set("ETag", etag(g.Rev))
	return c.JSON(http.StatusOK, out)
}

// guardrailFields reads a GuardrailInput's name, version and params.
func guardrailFields(in GuardrailInput) (name, version string, params []byte, err error) {
	version = "v1"
	if in.Version != nil {
		version = *in.Version
	}
	p := map[string]any{}
	if in.Params != nil {
		p = *in.Params
	}
	params, err = json.Marshal(p)
	return in.Name, version, params, err
}

// guardrailsChanged checks the provider's chain (problems of guardrail id
// point into the request), bumps the list revision and the version, and
// records the change.
func (s *Server) guardrailsChanged(ctx context.Context, c echo.Context, tx store.Tx, providerID, id, action string, before, after any) (int64, error) {
	if _, err := tx.BumpGuardrailsRev(ctx, providerID, -1); err != nil {
		return 0, err
	}
	if err := s.checkProvider(ctx, tx, providerID, guardrailMapper(id)); err != nil {
		return 0, err
	}
	v, err := tx.BumpVersion(ctx)
	if err != nil {
		return 0, err
	}
	return v, s.audit(ctx, c, tx, action, "guardrail", id, before, after)
}

func (s *Server) CreateGuardrail(c echo.Context, providerID ProviderId) error {
	ctx := c.Request().Context()
	var in GuardrailInput
	if err := bind(c, &in); err != nil {
		return err
	}
	name, version, params, err := guardrailFields(in)
	if err != nil {
		return err
	}
	now := s.now()
	g := store.Guardrail{ID: newID("grd"), ProviderID: providerID, Name: name, Version: version, Params: params, Rev: 1,
		CreatedAt: now, UpdatedAt: now}
	err = s.write(ctx, func(tx store.Tx) (int64, error) {
		if _, err := tx.GetProvider(ctx, providerID); err != nil {
			return 0, storeError(err, "provider", providerID)
		}
		existing, err := tx.ListGuardrails(ctx, providerID)
		if err != nil {
			return 0, err
		}
		g.Position = len(existing)
		if err := tx.InsertGuardrail(ctx, g); err != nil {
			return 0, err
		}
		if in.Position != nil && *in.Position < len(existing) {
			ids := make([]string, 0, len(existing)+1)
			for _, e := range existing {
				if len(ids) == *in.Position {
					ids = append(ids, g.ID)
				}
				ids = append(ids, e.ID)
			}
			if err := tx.SetGuardrailPositions(ctx, providerID, ids); err != nil {
				return 0, err
			}
			g.Position = *in.Position
		}
		after, err := toGuardrail(g)
		if err != nil {
			return 0, err
		}
		return s.guardrailsChanged(ctx, c, tx, providerID, g.ID, "guardrail.create", nil, after)
	})
	if err != nil {
		return err
	}
	out, err := toGuardrail(g)
	if err != nil {
		return err
	}
	c.Response().Header().Set("ETag", etag(g.Rev))
	return c.JSON(http.StatusCreated, out)
}

func (s *Server) UpdateGuardrail(c echo.Context, providerID ProviderId, id string, params UpdateGuardrailParams) error {
	ctx := c.Request().Context()
	rev, err := ifMatch(params.IfMatch)
	if err != nil {
		return err
	}
	var in GuardrailInput
	if err := bind(c, &in); err != nil {
		return err
	}
	name, version, p, err := guardrailFields(in)
	if err != nil {
		return err
	}
	var g store.Guardrail
	err = s.write(ctx, func(tx store.Tx) (int64, error) {
		old, err := tx.GetGuardrail(ctx, providerID, id)
		if err != nil {
			return 0, storeError(err, "guardrail", id)
		}
		if rev < 0 {
			rev = old.Rev
		}
		g = old
		g.Name, g.Version, g.Params, g.UpdatedAt = name, version, p, s.now()
		if g.Rev, err = tx.UpdateGuardrail(ctx, g, rev); err != nil {
			return 0, storeError(err, "guardrail", id)
		}
		before, err := toGuardrail(old)
		if err != nil {
			return 0, err
		}
		after, err := toGuardrail(g)
		if err != nil {
			return 0, err
		}
		return s.guardrailsChanged(ctx, c, tx, providerID, id, "guardrail.update", before, after)
	})
	if err != nil {
		return err
	}
	out, err := toGuardrail(g)
	if err != nil {
		return err
	}
	c.Response().Header().Set("ETag", etag(g.Rev))
	return c.JSON(http.StatusOK, out)
}

func (s *Server) DeleteGuardrail(c echo.Context, providerID ProviderId, id string, params DeleteGuardrailParams) error {
	ctx := c.Request().Context()
	rev, err := ifMatch(params.IfMatch)
	if err != nil {
		return err
	}
	err = s.write(ctx, func(tx store.Tx) (int64, error) {
		old, err := tx.GetGuardrail(ctx, providerID, id)
		if err != nil {
			return 0, storeError(err, "guardrail", id)
		}
		if rev >= 0 && rev != old.Rev {
			return 0, errStale
		}
		if err := tx.DeleteGuardrail(ctx, providerID, id); err != nil {
			return 0, err
		}
		rest, err := tx.ListGuardrails(ctx, providerID)
		if err != nil {
			return 0, err
		}
		ids := make([]string, len(rest))
		for i, g := range rest {
			ids[i] = g.ID
		}
		if err := tx.SetGuardrailPositions(ctx, providerID, ids); err != nil {
			return 0, err
		}
		before, err := toGuardrail(old)
		if err != nil {
			return 0, err
		}
		return s.guardrailsChanged(ctx, c, tx, providerID, id, "guardrail.delete", before, nil)
	})
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) OrderGuardrails(c echo.Context, providerID ProviderId, params OrderGuardrailsParams) error {
	ctx := c.Request().Context()
	rev, err := ifMatch(params.IfMatch)
	if err != nil {
		return err
	}
	var in GuardrailOrder
	if err := bind(c, &in); err != nil {
		return err
	}
	var (
		out    GuardrailList
		newRev int64
	)
	err = s.write(ctx, func(tx store.Tx) (int64, error) {
		before, _, err := s.listGuardrails(ctx, tx, providerID)
		if err != nil {
			return 0, err
		}
		if newRev, err = tx.BumpGuardrailsRev(ctx, providerID, rev); err != nil {
			return 0, storeError(err, "provider", providerID)
		}
		if err := tx.SetGuardrailPositions(ctx, providerID, in.Ids); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return 0, invalid([]Problem{problem("$.ids", "list every guardrail of the provider exactly once")})
			}
			return 0, err
		}
		if err := s.checkProvider(ctx, tx, providerID, guardrailMapper("")); err != nil {
			return 0, err
		}
		if out, _, err = s.listGuardrails(ctx, tx, providerID); err != nil {
			return 0, err
		}
		v, err := tx.BumpVersion(ctx)
		if err != nil {
			return 0, err
		}
		return v, s.audit(ctx, c, tx, "guardrails.order", "provider", providerID, before, out)
	})
	if err != nil {
		return err
	}
	c.Response().Header().Set("ETag", etag(newRev))
	return c.JSON(http.StatusOK, out)
}
