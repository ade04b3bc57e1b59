package api

import (
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"

	"sluice/platform/generate"
	"sluice/platform/store"
)

// The API's RateLimits and generate.RateLimits have the same JSON shape
// (the document's schema); settings are stored as that JSON.

func decodeRateLimits(b []byte) (RateLimits, error) {
	var out RateLimits
	if len(b) == 0 {
		return out, nil
	}
	return out, json.Unmarshal(b, &out)
}

func (s *Server) GetRateLimits(c echo.Context, id ProviderId) error {
	ctx := c.Request().Context()
	var p store.Provider
	err := s.store.Read(ctx, func(tx store.Tx) (err error) {
		p, err = tx.GetProvider(ctx, id)
		return err
	})
	if err != nil {
		return storeError(err, "provider", id)
	}
	rl, err := decodeRateLimits(p.RateLimits)
	if err != nil {
		return err
	}
	c.Response().Header().Set("ETag", etag(p.RateLimitsRev))
	return c.JSON(http.StatusOK, rl)
}

func (s *Server) PutRateLimits(c echo.Context, id ProviderId, params PutRateLimitsParams) error {
	ctx := c.Request().Context()
	rev, err := ifMatch(params.IfMatch)
	if err != nil {
		return err
	}
	var in RateLimits
	if err := bind(c, &in); err != nil {
		return err
	}
	doc, err := json.Marshal(in)
	if err != nil {
		return err
	}
	var settings generate.RateLimits
	if err := json.Unmarshal(doc, &settings); err != nil {
		return err
	}
	if ps := settings.Validate(); len(ps) > 0 {
		problems := make([]Problem, len(ps))
		for i, p := range ps {
			problems[i] = Problem{Path: p.Path, Message: p.Message}
		}
		return invalid(problems)
	}
	var newRev int64
	err = s.write(ctx, func(tx store.Tx) (int64, error) {
		p, err := tx.GetProvider(ctx, id)
		if err != nil {
			return 0, storeError(err, "provider", id)
		}
		if rev < 0 {
			rev = p.RateLimitsRev
		}
		before, err := decodeRateLimits(p.RateLimits)
		if err != nil {
			return 0, err
		}
		if newRev, err = tx.SetRateLimits(ctx, id, doc, rev, s.now()); err != nil {
			return 0, storeError(err, "provider", id)
		}
		if err := s.checkProvider(ctx, tx, id, rateLimitMapper); err != nil {
			return 0, err
		}
		v, err := tx.BumpVersion(ctx)
		if err != nil {
			return 0, err
		}
		return v, s.audit(ctx, c, tx, "rate-limits.update", "provider", id, before, in)
	})
	if err != nil {
		return err
	}
	c.Response().Header().Set("ETag", etag(newRev))
	return c.JSON(http.StatusOK, in)
}
