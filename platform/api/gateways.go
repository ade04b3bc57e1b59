package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"sluice/platform/delivery"
	"sluice/platform/store"
	"sluice/policydefs"
)

// GatewayTokenPrefix starts every gateway token.
const GatewayTokenPrefix = "sluice-gw-"

// gatewayState is what a gateway serves compared with version.
func gatewayState(g store.Gateway, version int64) GatewayState {
	switch {
	case g.RevokedAt != nil:
		return GatewayStateRevoked
	case g.LastResult == "":
		return GatewayStateUnknown
	case g.AppliedVersion >= version:
		return GatewayStateApplied
	case g.LastResult == "failed" && g.LastVersion >= version:
		return GatewayStateFailed
	}
	return GatewayStatePending
}

func toGateway(g store.Gateway, version int64) Gateway {
	out := Gateway{Id: g.ID, Name: g.Name, CreatedAt: g.CreatedAt, RevokedAt: timePtr(g.RevokedAt), AppliedVersion: g.AppliedVersion,
		AppliedAt: timePtr(g.AppliedAt), LastVersion: g.LastVersion, LastSeenAt: timePtr(g.LastSeenAt), State: gatewayState(g, version)}
	if g.LastError != "" {
		out.LastError = ptr(g.LastError)
	}
	return out
}

func (s *Server) ListGateways(c echo.Context) error {
	ctx := c.Request().Context()
	out := GatewayList{Gateways: []Gateway{}}
	err := s.store.Read(ctx, func(tx store.Tx) error {
		v, err := tx.Version(ctx)
		if err != nil {
			return err
		}
		out.CurrentVersion = v
		gs, err := tx.ListGateways(ctx)
		for _, g := range gs {
			out.Gateways = append(out.Gateways, toGateway(g, v))
		}
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) GetGateway(c echo.Context, id string) error {
	ctx := c.Request().Context()
	var out Gateway
	err := s.store.Read(ctx, func(tx store.Tx) error {
		v, err := tx.Version(ctx)
		if err != nil {
			return err
		}
		g, err := tx.GetGateway(ctx, id)
		if err != nil {
			return storeError(err, "gateway", id)
		}
		out = toGateway(g, v)
		return nil
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) CreateGateway(c echo.Context) error {
	ctx := c.Request().Context()
	var in GatewayInput
	if err := bind(c, &in); err != nil {
		return err
	}
	token := newSecret(GatewayTokenPrefix)
	g := store.Gateway{ID: newID("gw"), Name: in.Name, TokenHash: TokenHash(token), CreatedAt: s.now()}
	var out Gateway
	err := s.write(ctx, func(tx store.Tx) (int64, error) {
		if err := tx.InsertGateway(ctx, g); err != nil {
			return 0, err
		}
		v, err := tx.Version(ctx)
		if err != nil {
			return 0, err
		}
		out = toGateway(g, v)
		return 0, s.audit(ctx, c, tx, "gateway.create", "gateway", g.ID, nil, out)
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, CreatedGateway{Id: out.Id, Name: out.Name, CreatedAt: out.CreatedAt, State: CreatedGatewayState(out.State),
		AppliedVersion: out.AppliedVersion, LastVersion: out.LastVersion, Token: token})
}

func (s *Server) RevokeGateway(c echo.Context, id string) error {
	ctx := c.Request().Context()
	err := s.write(ctx, func(tx store.Tx) (int64, error) {
		v, err := tx.Version(ctx)
		if err != nil {
			return 0, err
		}
		old, err := tx.GetGateway(ctx, id)
		if err != nil {
			return 0, storeError(err, "gateway", id)
		}
		if old.RevokedAt != nil {
			return 0, nil
		}
		if err := tx.RevokeGateway(ctx, id, s.now()); err != nil {
			return 0, err
		}
		g, err := tx.GetGateway(ctx, id)
		if err != nil {
			return 0, err
		}
		return 0, s.audit(ctx, c, tx, "gateway.revoke", "gateway", id, toGateway(old, v), toGateway(g, v))
	})
	if err != nil {
		return err
	}
	s.hub.Kick() // its waiting long polls end with 401
	return c.NoContent(http.StatusNoContent)
}

// PollDeployment is the gateways' long poll.
func (s *Server) PollDeployment(c echo.Context, params PollDeploymentParams) error {
	ctx := c.Request().Context()
	after, wait := int64(0), 30
	if params.After != nil {
		after = *params.After
	}
	if params.Wait != nil {
		wait = *params.Wait
	}
	deadline := s.now().Add(time.Duration(wait) * time.Second)
	for {
		if _, ok := s.hub.Wait(ctx, after, deadline.Sub(s.now())); ok {
			break
		}
		if ctx.Err() != nil || !s.now().Before(deadline) {
			return c.NoContent(http.StatusNoContent)
		}
		// Kicked (a gateway was revoked): is it this one?
		if _, err := s.gatewayToken(ctx, bearer(c.Request())); err != nil {
			return err
		}
	}
	doc, err := s.hub.Current(ctx)
	if err != nil {
		return err
	}
	if doc.Version <= after {
		return c.NoContent(http.StatusNoContent)
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, GatewayDeployment{Version: doc.Version, Document: string(doc.Text)})
}

// ReportStatus records a gateway's check-in.
func (s *Server) ReportStatus(c echo.Context) error {
	ctx := c.Request().Context()
	var in GatewayStatus
	if err := bind(c, &in); err != nil {
		return err
	}
	id, _ := c.Get(ctxGatewayID).(string)
	st := delivery.Status{Version: in.Version, Result: string(in.Result)}
	if in.Error != nil {
		st.Error = *in.Error
	}
	if in.KeysLastUsed != nil {
		st.KeysLastUsed = *in.KeysLastUsed
	}
	err := s.hub.Report(ctx, id, st)
	if errors.Is(err, delivery.ErrRevoked) || errors.Is(err, store.ErrNotFound) {
		return errUnauthorized
	}
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) ListPolicies(c echo.Context) error {
	out := PolicyList{Policies: []Policy{}}
	for _, d := range policydefs.All() {
		var schema map[string]any
		if err := json.Unmarshal(d.ParamsSchema, &schema); err != nil {
			return err
		}
		out.Policies = append(out.Policies, Policy{Name: d.Name, Version: d.Version, Description: d.Description, ParamsSchema: schema})
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) ListAudit(c echo.Context, params ListAuditParams) error {
	ctx := c.Request().Context()
	limit := 100
	if params.Limit != nil {
		limit = *params.Limit
	}
	var before int64
	if params.Before != nil {
		before = *params.Before
	}
	var entries []store.AuditEntry
	err := s.store.Read(ctx, func(tx store.Tx) (err error) {
		entries, err = tx.ListAudit(ctx, before, limit+1)
		return err
	})
	if err != nil {
		return err
	}
	out := AuditPage{Entries: []AuditEntry{}}
	if len(entries) > limit {
		entries = entries[:limit]
		out.Next = ptr(entries[limit-1].ID)
	}
	for _, e := range entries {
		ae := AuditEntry{Id: e.ID, At: e.At, TokenId: e.TokenID, Action: e.Action, ResourceType: e.ResourceType, ResourceId: e.ResourceID}
		for _, side := range []struct {
			raw []byte
			dst **map[string]any
		}{{e.Before, &ae.Before}, {e.After, &ae.After}} {
			if side.raw == nil {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(side.raw, &m); err != nil {
				return err
			}
			*side.dst = &m
		}
		out.Entries = append(out.Entries, ae)
	}
	return c.JSON(http.StatusOK, out)
}
