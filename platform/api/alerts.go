package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"sluice/platform/alerts"
	"sluice/platform/store"
)

func (s *Server) ListAlerts(c echo.Context, p ListAlertsParams) error {
	ctx := c.Request().Context()
	q := store.AlertQuery{Limit: 100}
	if p.Limit != nil {
		q.Limit = *p.Limit
	}
	if p.Application != nil {
		q.Application = *p.Application
	}
	if p.Provider != nil {
		q.Provider = *p.Provider
	}
	if p.Cursor != nil && *p.Cursor != "" {
		at, id, ok := strings.Cut(*p.Cursor, ":")
		n, err := strconv.ParseInt(at, 10, 64)
		if !ok || err != nil || id == "" {
			return invalid([]Problem{problem("query.cursor", "not a cursor of this list (pass nextCursor as is)")})
		}
		q.BeforeAt, q.BeforeID = time.UnixMicro(n), id
	}
	// One more than the page tells whether another page follows.
	want := q.Limit
	q.Limit++
	var es []store.AlertEvent
	err := s.store.Read(ctx, func(tx store.Tx) (err error) {
		es, err = tx.ListAlertEvents(ctx, q)
		return err
	})
	if err != nil {
		return err
	}
	out := AlertPage{Alerts: []Alert{}}
	if len(es) > want {
		es = es[:want]
		last := es[len(es)-1]
		out.NextCursor = strconv.FormatInt(last.At.UnixMicro(), 10) + ":" + last.ID
	}
	for _, e := range es {
		a, err := toAlert(e)
		if err != nil {
			return err
		}
		out.Alerts = append(out.Alerts, a)
	}
	return c.JSON(http.StatusOK, out)
}

func toAlert(e store.AlertEvent) (Alert, error) {
	var ev alerts.Event
	if err := json.Unmarshal(e.Payload, &ev); err != nil {
		return Alert{}, err
	}
	a := Alert{
		Id: e.ID, At: ev.At, Threshold: ev.Threshold, Trigger: AlertTrigger(ev.Trigger), ApplicationId: ev.ApplicationID,
		Provider: ev.Provider, Route: ev.Route, Policy: ev.Policy, Origin: ev.Origin, Scope: ev.Scope, Resource: ev.Resource,
		Dimension: ev.Dimension, Period: ev.Period, Unit: ev.Unit, Limit: ev.Limit, Used: ev.Used,
		UsedPercent: ptr(ev.UsedPercent), WindowResetsAt: ev.WindowResetsAt,
		Delivery: AlertDelivery{State: AlertDeliveryState(e.State), Attempts: e.Attempts, LastError: e.LastError,
			DeliveredAt: timePtr(e.DeliveredAt)},
	}
	return a, nil
}

func webhookView(w store.AlertWebhook) AlertWebhook {
	return AlertWebhook{Url: w.URL, SecretSet: w.SecretSealed != nil}
}

// readWebhook is the stored webhook, the zero value when none is set.
func readWebhook(ctx context.Context, tx store.Tx) (store.AlertWebhook, error) {
	w, err := tx.AlertWebhook(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return store.AlertWebhook{}, nil
	}
	return w, err
}

func (s *Server) GetAlertWebhook(c echo.Context) error {
	ctx := c.Request().Context()
	var w store.AlertWebhook
	err := s.store.Read(ctx, func(tx store.Tx) (err error) {
		w, err = readWebhook(ctx, tx)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, webhookView(w))
}

func (s *Server) PutAlertWebhook(c echo.Context) error {
	ctx := c.Request().Context()
	var in AlertWebhookInput
	if err := bind(c, &in); err != nil {
		return err
	}
	var ps []Problem
	if u, err := url.Parse(in.Url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		ps = append(ps, problem("$.url", "must be an absolute http or https URL"))
	} else if u.User != nil {
		ps = append(ps, problem("$.url", "must not carry credentials: sign with secret instead"))
	}
	if in.Secret != nil && *in.Secret == "" {
		ps = append(ps, problem("$.secret", "must not be empty (leave it out to keep the current one)"))
	}
	if len(ps) > 0 {
		return invalid(ps)
	}
	var after store.AlertWebhook
	err := s.store.Write(ctx, func(tx store.Tx) error {
		before, err := readWebhook(ctx, tx)
		if err != nil {
			return err
		}
		after = store.AlertWebhook{URL: in.Url, SecretSealed: before.SecretSealed, UpdatedAt: s.now()}
		if in.Secret != nil {
			if after.SecretSealed, err = s.box.Seal([]byte(*in.Secret), alerts.SecretAAD); err != nil {
				return err
			}
		}
		if err := tx.SetAlertWebhook(ctx, after); err != nil {
			return err
		}
		var b any
		if before.URL != "" {
			b = webhookView(before)
		}
		return s.audit(ctx, c, tx, "alerts-webhook.update", "alerts-webhook", "webhook", b, webhookView(after))
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, webhookView(after))
}

func (s *Server) DeleteAlertWebhook(c echo.Context) error {
	ctx := c.Request().Context()
	err := s.store.Write(ctx, func(tx store.Tx) error {
		before, err := tx.AlertWebhook(ctx)
		if errors.Is(err, store.ErrNotFound) {
			return nil // already none
		}
		if err != nil {
			return err
		}
		if err := tx.DeleteAlertWebhook(ctx); err != nil {
			return err
		}
		return s.audit(ctx, c, tx, "alerts-webhook.delete", "alerts-webhook", "webhook", webhookView(before), nil)
	})
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
