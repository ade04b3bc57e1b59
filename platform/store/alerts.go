package store

// Budget alerts: the webhook setting and the events' outbox (migration
// 00004). Same SQL text on both engines.

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"
)

// AlertWebhook is where alert events are POSTed.
type AlertWebhook struct {
	URL string
	// SecretSealed is the signing secret, encrypted (platform/secrets); nil
	// when none was given.
	SecretSealed []byte
	UpdatedAt    time.Time
}

// Delivery states of an alert event.
const (
	AlertPending   = "pending"
	AlertDelivered = "delivered"
	AlertFailed    = "failed"
	// AlertNone: no webhook was set when the event was created.
	AlertNone = "none"
)

// AlertEvent is one budget alert and its delivery.
type AlertEvent struct {
	ID string
	At time.Time
	// Dedupe is the once-per-window key; unique.
	Dedupe        string
	ApplicationID string
	Provider      string
	// Payload is the JSON body the webhook receives.
	Payload     []byte
	State       string
	Attempts    int
	LastError   string
	NextAt      time.Time
	DeliveredAt *time.Time
}

// AlertQuery selects events for ListAlertEvents: newest first (by At, then
// ID, descending), after the cursor (BeforeAt, BeforeID) when BeforeID is
// set, filtered by application and provider when set.
type AlertQuery struct {
	Application, Provider string
	BeforeAt              time.Time
	BeforeID              string
	Limit                 int
}

// AlertResult is the outcome of one delivery attempt.
type AlertResult struct {
	State       string
	Attempts    int
	LastError   string
	NextAt      time.Time
	DeliveredAt *time.Time
}

// AlertTx is the part of Tx for budget alerts.
type AlertTx interface {
	// AlertWebhook returns the webhook (ErrNotFound when none is set).
	AlertWebhook(ctx context.Context) (AlertWebhook, error)
	SetAlertWebhook(ctx context.Context, w AlertWebhook) error
	// DeleteAlertWebhook removes it (ErrNotFound when none is set).
	DeleteAlertWebhook(ctx context.Context) error
	// InsertAlertEvent stores e unless an event of the same Dedupe key is
	// stored; inserted says which.
	InsertAlertEvent(ctx context.Context, e AlertEvent) (inserted bool, err error)
	ListAlertEvents(ctx context.Context, q AlertQuery) ([]AlertEvent, error)
	// ClaimAlertEvents marks at most limit pending events due at now and not
	// claimed (or whose claim expired) as claimed until until, and returns
	// them, earliest due first. Two transactions never claim one event
	// while its claim runs.
	ClaimAlertEvents(ctx context.Context, now, until time.Time, limit int) ([]AlertEvent, error)
	// FinishAlertEvent records an attempt's result and releases the claim.
	FinishAlertEvent(ctx context.Context, id string, r AlertResult) error
}

func (t *sqlTx) AlertWebhook(ctx context.Context) (AlertWebhook, error) {
	var w AlertWebhook
	var at int64
	err := t.tx.QueryRowContext(ctx, `SELECT url, secret_sealed, updated_at FROM alert_webhook WHERE id = 1`).
		Scan(&w.URL, &w.SecretSealed, &at)
	if err != nil {
		return w, scanErr(err)
	}
	w.UpdatedAt = fromUS(at)
	return w, nil
}

func (t *sqlTx) SetAlertWebhook(ctx context.Context, w AlertWebhook) error {
	_, err := t.exec(ctx, `INSERT INTO alert_webhook (id, url, secret_sealed, updated_at) VALUES (1, $1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET url = excluded.url, secret_sealed = excluded.secret_sealed, updated_at = excluded.updated_at`,
		w.URL, w.SecretSealed, us(w.UpdatedAt))
	return err
}

func (t *sqlTx) DeleteAlertWebhook(ctx context.Context) error {
	return t.execOne(ctx, `DELETE FROM alert_webhook WHERE id = 1`)
}

func (t *sqlTx) InsertAlertEvent(ctx context.Context, e AlertEvent) (bool, error) {
	res, err := t.exec(ctx, `INSERT INTO alert_events (id, at, dedupe, application_id, provider, payload, state, attempts,
		last_error, next_at, claimed_until, delivered_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 0, $11)
		ON CONFLICT (dedupe) DO NOTHING`,
		e.ID, us(e.At), e.Dedupe, e.ApplicationID, e.Provider, string(e.Payload), e.State, e.Attempts, e.LastError,
		us(e.NextAt), nullUS(e.DeliveredAt))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

const alertColumns = `id, at, dedupe, application_id, provider, payload, state, attempts, last_error, next_at, delivered_at`

func scanAlerts(rows *sql.Rows) ([]AlertEvent, error) {
	defer rows.Close()
	var out []AlertEvent
	for rows.Next() {
		var e AlertEvent
		var at, next int64
		var payload string
		var delivered sql.NullInt64
		if err := rows.Scan(&e.ID, &at, &e.Dedupe, &e.ApplicationID, &e.Provider, &payload, &e.State, &e.Attempts,
			&e.LastError, &next, &delivered); err != nil {
			return nil, scanErr(err)
		}
		e.At, e.NextAt, e.Payload, e.DeliveredAt = fromUS(at), fromUS(next), []byte(payload), ptrUS(delivered)
		out = append(out, e)
	}
	return out, scanRowsErr(rows)
}

func (t *sqlTx) ListAlertEvents(ctx context.Context, q AlertQuery) ([]AlertEvent, error) {
	var b strings.Builder
	b.WriteString(`SELECT ` + alertColumns + ` FROM alert_events WHERE 1 = 1`)
	args := []any{q.Limit}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if q.Application != "" {
		b.WriteString(` AND application_id = ` + arg(q.Application))
	}
	if q.Provider != "" {
		b.WriteString(` AND provider = ` + arg(q.Provider))
	}
	if q.BeforeID != "" {
		at := arg(us(q.BeforeAt))
		b.WriteString(` AND (at < ` + at + ` OR (at = ` + at + ` AND id < ` + arg(q.BeforeID) + `))`)
	}
	b.WriteString(` ORDER BY at DESC, id DESC LIMIT $1`)
	rows, err := t.tx.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, scanErr(err)
	}
	return scanAlerts(rows)
}

func (t *sqlTx) ClaimAlertEvents(ctx context.Context, now, until time.Time, limit int) ([]AlertEvent, error) {
	// The outer conditions repeat the inner ones: on PostgreSQL a
	// transaction that waited for another's claim of a row re-checks them
	// on the row as the other left it, and skips it.
	rows, err := t.tx.QueryContext(ctx, `UPDATE alert_events SET claimed_until = $1
		WHERE state = 'pending' AND next_at <= $2 AND claimed_until <= $2 AND id IN (
			SELECT id FROM alert_events WHERE state = 'pending' AND next_at <= $2 AND claimed_until <= $2
			ORDER BY next_at, id LIMIT $3)
		RETURNING `+alertColumns, us(until), us(now), limit)
	if err != nil {
		return nil, scanErr(err)
	}
	out, err := scanAlerts(rows)
	if err != nil {
		return nil, err
	}
	// RETURNING gives no order.
	sortAlerts(out)
	return out, nil
}

func (t *sqlTx) FinishAlertEvent(ctx context.Context, id string, r AlertResult) error {
	err := t.execOne(ctx, `UPDATE alert_events SET state = $2, attempts = $3, last_error = $4, next_at = $5,
		delivered_at = $6, claimed_until = 0 WHERE id = $1`,
		id, r.State, r.Attempts, r.LastError, us(r.NextAt), nullUS(r.DeliveredAt))
	if errors.Is(err, ErrNotFound) {
		return ErrNotFound
	}
	return err
}

func sortAlerts(es []AlertEvent) {
	slices.SortFunc(es, func(a, b AlertEvent) int {
		if c := a.NextAt.Compare(b.NextAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}
