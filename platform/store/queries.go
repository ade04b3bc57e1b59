package store

// Every query of the store, in one place. The text is the same on SQLite and
// PostgreSQL: $n placeholders, INTEGER/BIGINT columns scanned as int64,
// RETURNING (SQLite >= 3.35).

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

type sqlTx struct {
	tx      *sql.Tx
	dialect string
}

func us(t time.Time) int64 { return t.UnixMicro() }

func fromUS(v int64) time.Time { return time.UnixMicro(v).UTC() }

func nullUS(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

func ptrUS(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromUS(v.Int64)
	return &t
}

func nullText(b []byte) sql.NullString {
	if b == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: string(b), Valid: true}
}

func textBytes(v sql.NullString) []byte {
	if !v.Valid {
		return nil
	}
	return []byte(v.String)
}

// exec runs a statement and maps unique violations to ErrConflict.
func (t *sqlTx) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	res, err := t.tx.ExecContext(ctx, q, args...)
	if err != nil {
		if isUnique(err) {
			return nil, fmt.Errorf("%w: %v", ErrConflict, err)
		}
		return nil, fmt.Errorf("store: %w", err)
	}
	return res, nil
}

// execOne runs a statement that must change exactly one row (ErrNotFound).
func (t *sqlTx) execOne(ctx context.Context, q string, args ...any) error {
	res, err := t.exec(ctx, q, args...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

func scanErr(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	return fmt.Errorf("store: %w", err)
}

// --- deployment version

func (t *sqlTx) Version(ctx context.Context) (int64, error) {
	var v int64
	err := t.tx.QueryRowContext(ctx, `SELECT version FROM deployment_state WHERE id = 1`).Scan(&v)
	if err != nil {
		return 0, scanErr(err)
	}
	return v, nil
}

func (t *sqlTx) BumpVersion(ctx context.Context) (int64, error) {
	var v int64
	err := t.tx.QueryRowContext(ctx, `UPDATE deployment_state SET version = version + 1 WHERE id = 1 RETURNING version`).Scan(&v)
	if err != nil {
		return 0, scanErr(err)
	}
	return v, nil
}

func (t *sqlTx) Counters(ctx context.Context) ([]byte, error) {
	var b []byte
	err := t.tx.QueryRowContext(ctx, `SELECT counters_sealed FROM deployment_state WHERE id = 1`).Scan(&b)
	if err != nil {
		return nil, scanErr(err)
	}
	if len(b) == 0 {
		return nil, nil
	}
	return b, nil
}

func (t *sqlTx) SetCounters(ctx context.Context, sealed []byte) error {
	var v any
	if len(sealed) > 0 {
		v = sealed
	}
	_, err := t.tx.ExecContext(ctx, `UPDATE deployment_state SET counters_sealed = $1 WHERE id = 1`, v)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// --- admin tokens

func (t *sqlTx) AdminTokenByHash(ctx context.Context, hash string) (AdminToken, error) {
	var a AdminToken
	var created int64
	var revoked sql.NullInt64
	err := t.tx.QueryRowContext(ctx, `SELECT id, name, hash, created_at, revoked_at FROM admin_tokens WHERE hash = $1`, hash).
		Scan(&a.ID, &a.Name, &a.Hash, &created, &revoked)
	if err != nil {
		return AdminToken{}, scanErr(err)
	}
	a.CreatedAt, a.RevokedAt = fromUS(created), ptrUS(revoked)
	return a, nil
}

func (t *sqlTx) CountAdminTokens(ctx context.Context) (int, error) {
	var n int
	if err := t.tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM admin_tokens WHERE revoked_at IS NULL`).Scan(&n); err != nil {
		return 0, scanErr(err)
	}
	return n, nil
}

func (t *sqlTx) InsertAdminToken(ctx context.Context, a AdminToken) error {
	_, err := t.exec(ctx, `INSERT INTO admin_tokens (id, name, hash, created_at, revoked_at) VALUES ($1, $2, $3, $4, $5)`,
		a.ID, a.Name, a.Hash, us(a.CreatedAt), nullUS(a.RevokedAt))
	return err
}

func (t *sqlTx) SetAdminTokenHash(ctx context.Context, a AdminToken) error {
	res, err := t.exec(ctx, `UPDATE admin_tokens SET hash = $2, revoked_at = NULL WHERE id = $1`, a.ID, a.Hash)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return nil
	}
	return t.InsertAdminToken(ctx, a)
}

// --- providers

const providerCols = `id, name, type, url, targets, auth_header, api_key_sealed, rate_limits, rate_limits_rev, guardrails_rev, created_at, updated_at,
	forward_headers, application_header, usage_report_url`

func scanProvider(row interface{ Scan(...any) error }) (Provider, error) {
	var p Provider
	var targets, limits, forward string
	var created, updated int64
	err := row.Scan(&p.ID, &p.Name, &p.Type, &p.URL, &targets, &p.AuthHeader, &p.APIKeySealed, &limits,
		&p.RateLimitsRev, &p.GuardrailsRev, &created, &updated, &forward, &p.ApplicationHeader, &p.UsageReportURL)
	if err != nil {
		return Provider{}, err
	}
	if err := json.Unmarshal([]byte(targets), &p.Targets); err != nil {
		return Provider{}, fmt.Errorf("provider %s: targets: %w", p.ID, err)
	}
	if err := json.Unmarshal([]byte(forward), &p.ForwardHeaders); err != nil {
		return Provider{}, fmt.Errorf("provider %s: forward headers: %w", p.ID, err)
	}
	if len(p.ForwardHeaders) == 0 {
		p.ForwardHeaders = nil
	}
	if limits != "" {
		p.RateLimits = []byte(limits)
	}
	p.CreatedAt, p.UpdatedAt = fromUS(created), fromUS(updated)
	return p, nil
}

// targetsJSON is a list of strings as a JSON array ([] for nil).
func targetsJSON(ts []string) string {
	if ts == nil {
		ts = []string{}
	}
	b, _ := json.Marshal(ts)
	return string(b)
}

func (t *sqlTx) ListProviders(ctx context.Context) ([]Provider, error) {
	rows, err := t.tx.QueryContext(ctx, `SELECT `+providerCols+` FROM providers ORDER BY name`)
	if err != nil {
		return nil, scanErr(err)
	}
	defer rows.Close()
	var out []Provider
	for rows.Next() {
		p, err := scanProvider(rows)
		if err != nil {
			return nil, scanErr(err)
		}
		out = append(out, p)
	}
	return out, scanRowsErr(rows)
}

func scanRowsErr(rows *sql.Rows) error {
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

func (t *sqlTx) GetProvider(ctx context.Context, id string) (Provider, error) {
	p, err := scanProvider(t.tx.QueryRowContext(ctx, `SELECT `+providerCols+` FROM providers WHERE id = $1`, id))
	if err != nil {
		return Provider{}, scanErr(err)
	}
	return p, nil
}

func (t *sqlTx) InsertProvider(ctx context.Context, p Provider) error {
	_, err := t.exec(ctx, `INSERT INTO providers (`+providerCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
		p.ID, p.Name, p.Type, p.URL, targetsJSON(p.Targets), p.AuthHeader, p.APIKeySealed, string(p.RateLimits),
		p.RateLimitsRev, p.GuardrailsRev, us(p.CreatedAt), us(p.UpdatedAt),
		targetsJSON(p.ForwardHeaders), p.ApplicationHeader, p.UsageReportURL)
	return err
}

func (t *sqlTx) UpdateProvider(ctx context.Context, p Provider) error {
	return t.execOne(ctx, `UPDATE providers SET name = $2, type = $3, url = $4, targets = $5, auth_header = $6,
		api_key_sealed = $7, updated_at = $8, forward_headers = $9, application_header = $10, usage_report_url = $11 WHERE id = $1`,
		p.ID, p.Name, p.Type, p.URL, targetsJSON(p.Targets), p.AuthHeader, p.APIKeySealed, us(p.UpdatedAt),
		targetsJSON(p.ForwardHeaders), p.ApplicationHeader, p.UsageReportURL)
}

func (t *sqlTx) DeleteProvider(ctx context.Context, id string) error {
	return t.execOne(ctx, `DELETE FROM providers WHERE id = $1`, id)
}

func (t *sqlTx) SetRateLimits(ctx context.Context, id string, settings []byte, ifRev int64, at time.Time) (int64, error) {
	var rev int64
	err := t.tx.QueryRowContext(ctx, `UPDATE providers SET rate_limits = $2, rate_limits_rev = rate_limits_rev + 1, updated_at = $4
		WHERE id = $1 AND rate_limits_rev = $3 RETURNING rate_limits_rev`, id, string(settings), ifRev, us(at)).Scan(&rev)
	if err == nil {
		return rev, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, scanErr(err)
	}
	if _, err := t.GetProvider(ctx, id); err != nil {
		return 0, err
	}
	return 0, ErrStale
}

func (t *sqlTx) BumpGuardrailsRev(ctx context.Context, id string, ifRev int64) (int64, error) {
	var rev int64
	err := t.tx.QueryRowContext(ctx, `UPDATE providers SET guardrails_rev = guardrails_rev + 1
		WHERE id = $1 AND ($2 < 0 OR guardrails_rev = $2) RETURNING guardrails_rev`, id, ifRev).Scan(&rev)
	if err == nil {
		return rev, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, scanErr(err)
	}
	if _, err := t.GetProvider(ctx, id); err != nil {
		return 0, err
	}
	return 0, ErrStale
}

// --- applications

func (t *sqlTx) grants(ctx context.Context, appID string) (map[string][]string, error) {
	q := `SELECT application_id, provider_id FROM application_providers`
	var args []any
	if appID != "" {
		q += ` WHERE application_id = $1`
		args = append(args, appID)
	}
	rows, err := t.tx.QueryContext(ctx, q+` ORDER BY application_id, provider_id`, args...)
	if err != nil {
		return nil, scanErr(err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var a, p string
		if err := rows.Scan(&a, &p); err != nil {
			return nil, scanErr(err)
		}
		out[a] = append(out[a], p)
	}
	return out, scanRowsErr(rows)
}

func (t *sqlTx) ListApplications(ctx context.Context) ([]Application, error) {
	grants, err := t.grants(ctx, "")
	if err != nil {
		return nil, err
	}
	rows, err := t.tx.QueryContext(ctx, `SELECT id, name, created_at, updated_at FROM applications ORDER BY name, id`)
	if err != nil {
		return nil, scanErr(err)
	}
	defer rows.Close()
	var out []Application
	for rows.Next() {
		var a Application
		var created, updated int64
		if err := rows.Scan(&a.ID, &a.Name, &created, &updated); err != nil {
			return nil, scanErr(err)
		}
		a.CreatedAt, a.UpdatedAt, a.Providers = fromUS(created), fromUS(updated), grants[a.ID]
		out = append(out, a)
	}
	return out, scanRowsErr(rows)
}

func (t *sqlTx) GetApplication(ctx context.Context, id string) (Application, error) {
	var a Application
	var created, updated int64
	err := t.tx.QueryRowContext(ctx, `SELECT id, name, created_at, updated_at FROM applications WHERE id = $1`, id).
		Scan(&a.ID, &a.Name, &created, &updated)
	if err != nil {
		return Application{}, scanErr(err)
	}
	grants, err := t.grants(ctx, id)
	if err != nil {
		return Application{}, err
	}
	a.CreatedAt, a.UpdatedAt, a.Providers = fromUS(created), fromUS(updated), grants[id]
	return a, nil
}

func (t *sqlTx) setGrants(ctx context.Context, a Application) error {
	if _, err := t.exec(ctx, `DELETE FROM application_providers WHERE application_id = $1`, a.ID); err != nil {
		return err
	}
	ps := append([]string(nil), a.Providers...)
	sort.Strings(ps)
	for i, p := range ps {
		if i > 0 && ps[i-1] == p {
			continue
		}
		if _, err := t.GetProvider(ctx, p); err != nil {
			if errors.Is(err, ErrNotFound) {
				return fmt.Errorf("%w: provider %q", ErrNotFound, p)
			}
			return err
		}
		if _, err := t.exec(ctx, `INSERT INTO application_providers (application_id, provider_id) VALUES ($1, $2)`, a.ID, p); err != nil {
			return err
		}
	}
	return nil
}

func (t *sqlTx) InsertApplication(ctx context.Context, a Application) error {
	if _, err := t.exec(ctx, `INSERT INTO applications (id, name, created_at, updated_at) VALUES ($1, $2, $3, $4)`,
		a.ID, a.Name, us(a.CreatedAt), us(a.UpdatedAt)); err != nil {
		return err
	}
	return t.setGrants(ctx, a)
}

func (t *sqlTx) UpdateApplication(ctx context.Context, a Application) error {
	if err := t.execOne(ctx, `UPDATE applications SET name = $2, updated_at = $3 WHERE id = $1`, a.ID, a.Name, us(a.UpdatedAt)); err != nil {
		return err
	}
	return t.setGrants(ctx, a)
}

func (t *sqlTx) DeleteApplication(ctx context.Context, id string) error {
	return t.execOne(ctx, `DELETE FROM applications WHERE id = $1`, id)
}

// --- API keys

const keyCols = `id, application_id, prefix, hash, created_at, expires_at, revoked_at, last_used_at`

func scanKey(row interface{ Scan(...any) error }) (APIKey, error) {
	var k APIKey
	var created int64
	var expires, revoked, used sql.NullInt64
	if err := row.Scan(&k.ID, &k.ApplicationID, &k.Prefix, &k.Hash, &created, &expires, &revoked, &used); err != nil {
		return APIKey{}, err
	}
	k.CreatedAt, k.ExpiresAt, k.RevokedAt, k.LastUsedAt = fromUS(created), ptrUS(expires), ptrUS(revoked), ptrUS(used)
	return k, nil
}

func (t *sqlTx) queryKeys(ctx context.Context, q string, args ...any) ([]APIKey, error) {
	rows, err := t.tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, scanErr(err)
	}
	defer rows.Close()
	var out []APIKey
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, scanErr(err)
		}
		out = append(out, k)
	}
	return out, scanRowsErr(rows)
}

func (t *sqlTx) ListKeys(ctx context.Context, applicationID string) ([]APIKey, error) {
	return t.queryKeys(ctx, `SELECT `+keyCols+` FROM api_keys WHERE application_id = $1 ORDER BY created_at, id`, applicationID)
}

func (t *sqlTx) ListUsableKeys(ctx context.Context, now time.Time) ([]APIKey, error) {
	return t.queryKeys(ctx, `SELECT `+keyCols+` FROM api_keys WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $1)
		ORDER BY application_id, created_at, id`, us(now))
}

func (t *sqlTx) GetKey(ctx context.Context, applicationID, id string) (APIKey, error) {
	k, err := scanKey(t.tx.QueryRowContext(ctx, `SELECT `+keyCols+` FROM api_keys WHERE application_id = $1 AND id = $2`, applicationID, id))
	if err != nil {
		return APIKey{}, scanErr(err)
	}
	return k, nil
}

func (t *sqlTx) InsertKey(ctx context.Context, k APIKey) error {
	_, err := t.exec(ctx, `INSERT INTO api_keys (`+keyCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		k.ID, k.ApplicationID, k.Prefix, k.Hash, us(k.CreatedAt), nullUS(k.ExpiresAt), nullUS(k.RevokedAt), nullUS(k.LastUsedAt))
	return err
}

func (t *sqlTx) RevokeKey(ctx context.Context, applicationID, id string, at time.Time) error {
	return t.execOne(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $3) WHERE application_id = $1 AND id = $2`,
		applicationID, id, us(at))
}

func (t *sqlTx) TouchKeys(ctx context.Context, lastUsed map[string]time.Time) error {
	ids := make([]string, 0, len(lastUsed))
	for id := range lastUsed {
		ids = append(ids, id)
	}
	sort.Strings(ids) // a stable lock order for concurrent check-ins
	for _, id := range ids {
		if _, err := t.exec(ctx, `UPDATE api_keys SET last_used_at = $2 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $2)`,
			id, us(lastUsed[id])); err != nil {
			return err
		}
	}
	return nil
}

// --- guardrails

const guardrailCols = `id, provider_id, position, name, version, params, rev, created_at, updated_at`

func scanGuardrail(row interface{ Scan(...any) error }) (Guardrail, error) {
	var g Guardrail
	var params string
	var created, updated int64
	if err := row.Scan(&g.ID, &g.ProviderID, &g.Position, &g.Name, &g.Version, &params, &g.Rev, &created, &updated); err != nil {
		return Guardrail{}, err
	}
	g.Params, g.CreatedAt, g.UpdatedAt = []byte(params), fromUS(created), fromUS(updated)
	return g, nil
}

func (t *sqlTx) queryGuardrails(ctx context.Context, q string, args ...any) ([]Guardrail, error) {
	rows, err := t.tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, scanErr(err)
	}
	defer rows.Close()
	var out []Guardrail
	for rows.Next() {
		g, err := scanGuardrail(rows)
		if err != nil {
			return nil, scanErr(err)
		}
		out = append(out, g)
	}
	return out, scanRowsErr(rows)
}

func (t *sqlTx) ListGuardrails(ctx context.Context, providerID string) ([]Guardrail, error) {
	return t.queryGuardrails(ctx, `SELECT `+guardrailCols+` FROM guardrails WHERE provider_id = $1 ORDER BY position, id`, providerID)
}

func (t *sqlTx) ListAllGuardrails(ctx context.Context) ([]Guardrail, error) {
	return t.queryGuardrails(ctx, `SELECT `+guardrailCols+` FROM guardrails ORDER BY provider_id, position, id`)
}

func (t *sqlTx) GetGuardrail(ctx context.Context, providerID, id string) (Guardrail, error) {
	g, err := scanGuardrail(t.tx.QueryRowContext(ctx, `SELECT `+guardrailCols+` FROM guardrails WHERE provider_id = $1 AND id = $2`, providerID, id))
	if err != nil {
		return Guardrail{}, scanErr(err)
	}
	return g, nil
}

func (t *sqlTx) InsertGuardrail(ctx context.Context, g Guardrail) error {
	_, err := t.exec(ctx, `INSERT INTO guardrails (`+guardrailCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		g.ID, g.ProviderID, g.Position, g.Name, g.Version, string(g.Params), g.Rev, us(g.CreatedAt), us(g.UpdatedAt))
	return err
}

func (t *sqlTx) UpdateGuardrail(ctx context.Context, g Guardrail, ifRev int64) (int64, error) {
	var rev int64
	err := t.tx.QueryRowContext(ctx, `UPDATE guardrails SET name = $3, version = $4, params = $5, position = $6, rev = rev + 1, updated_at = $7
		WHERE provider_id = $1 AND id = $2 AND rev = $8 RETURNING rev`,
		g.ProviderID, g.ID, g.Name, g.Version, string(g.Params), g.Position, us(g.UpdatedAt), ifRev).Scan(&rev)
	if err == nil {
		return rev, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, scanErr(err)
	}
	if _, err := t.GetGuardrail(ctx, g.ProviderID, g.ID); err != nil {
		return 0, err
	}
	return 0, ErrStale
}

func (t *sqlTx) DeleteGuardrail(ctx context.Context, providerID, id string) error {
	return t.execOne(ctx, `DELETE FROM guardrails WHERE provider_id = $1 AND id = $2`, providerID, id)
}

func (t *sqlTx) SetGuardrailPositions(ctx context.Context, providerID string, ids []string) error {
	have, err := t.ListGuardrails(ctx, providerID)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, id := range ids {
		if want[id] {
			return fmt.Errorf("%w: guardrail %q listed twice", ErrConflict, id)
		}
		want[id] = true
	}
	if len(have) != len(ids) {
		return fmt.Errorf("%w: %d guardrails, %d ids given", ErrConflict, len(have), len(ids))
	}
	for _, g := range have {
		if !want[g.ID] {
			return fmt.Errorf("%w: guardrail %q not listed", ErrConflict, g.ID)
		}
	}
	for i, id := range ids {
		if _, err := t.exec(ctx, `UPDATE guardrails SET position = $3 WHERE provider_id = $1 AND id = $2`, providerID, id, i); err != nil {
			return err
		}
	}
	return nil
}

// --- gateways

const gatewayCols = `id, name, token_hash, created_at, revoked_at, applied_version, applied_at, last_version, last_result, last_error, last_seen_at`

func scanGateway(row interface{ Scan(...any) error }) (Gateway, error) {
	var g Gateway
	var token sql.NullString
	var created int64
	var revoked, applied, seen sql.NullInt64
	if err := row.Scan(&g.ID, &g.Name, &token, &created, &revoked, &g.AppliedVersion, &applied, &g.LastVersion,
		&g.LastResult, &g.LastError, &seen); err != nil {
		return Gateway{}, err
	}
	g.TokenHash = token.String
	g.CreatedAt, g.RevokedAt, g.AppliedAt, g.LastSeenAt = fromUS(created), ptrUS(revoked), ptrUS(applied), ptrUS(seen)
	return g, nil
}

func (t *sqlTx) ListGateways(ctx context.Context) ([]Gateway, error) {
	rows, err := t.tx.QueryContext(ctx, `SELECT `+gatewayCols+` FROM gateways ORDER BY name, id`)
	if err != nil {
		return nil, scanErr(err)
	}
	defer rows.Close()
	var out []Gateway
	for rows.Next() {
		g, err := scanGateway(rows)
		if err != nil {
			return nil, scanErr(err)
		}
		out = append(out, g)
	}
	return out, scanRowsErr(rows)
}

func (t *sqlTx) GetGateway(ctx context.Context, id string) (Gateway, error) {
	g, err := scanGateway(t.tx.QueryRowContext(ctx, `SELECT `+gatewayCols+` FROM gateways WHERE id = $1`, id))
	if err != nil {
		return Gateway{}, scanErr(err)
	}
	return g, nil
}

func (t *sqlTx) GatewayByTokenHash(ctx context.Context, hash string) (Gateway, error) {
	if hash == "" {
		return Gateway{}, ErrNotFound
	}
	g, err := scanGateway(t.tx.QueryRowContext(ctx, `SELECT `+gatewayCols+` FROM gateways WHERE token_hash = $1`, hash))
	if err != nil {
		return Gateway{}, scanErr(err)
	}
	return g, nil
}

func (t *sqlTx) InsertGateway(ctx context.Context, g Gateway) error {
	token := sql.NullString{String: g.TokenHash, Valid: g.TokenHash != ""}
	_, err := t.exec(ctx, `INSERT INTO gateways (`+gatewayCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		g.ID, g.Name, token, us(g.CreatedAt), nullUS(g.RevokedAt), g.AppliedVersion, nullUS(g.AppliedAt), g.LastVersion,
		g.LastResult, g.LastError, nullUS(g.LastSeenAt))
	return err
}

func (t *sqlTx) RevokeGateway(ctx context.Context, id string, at time.Time) error {
	return t.execOne(ctx, `UPDATE gateways SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1`, id, us(at))
}

func (t *sqlTx) ReportGateway(ctx context.Context, id string, r Report) error {
	if r.Result == "applied" {
		return t.execOne(ctx, `UPDATE gateways SET last_seen_at = $2, last_version = $3, last_result = $4, last_error = $5,
			applied_version = $3, applied_at = $2 WHERE id = $1`, id, us(r.At), r.Version, r.Result, r.Error)
	}
	return t.execOne(ctx, `UPDATE gateways SET last_seen_at = $2, last_version = $3, last_result = $4, last_error = $5 WHERE id = $1`,
		id, us(r.At), r.Version, r.Result, r.Error)
}

// --- audit

func (t *sqlTx) InsertAudit(ctx context.Context, e AuditEntry) (int64, error) {
	var id int64
	err := t.tx.QueryRowContext(ctx, `INSERT INTO audit (at, token_id, action, resource_type, resource_id, before_doc, after_doc)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`,
		us(e.At), e.TokenID, e.Action, e.ResourceType, e.ResourceID, nullText(e.Before), nullText(e.After)).Scan(&id)
	if err != nil {
		return 0, scanErr(err)
	}
	return id, nil
}

func (t *sqlTx) ListAudit(ctx context.Context, beforeID int64, limit int) ([]AuditEntry, error) {
	var b strings.Builder
	b.WriteString(`SELECT id, at, token_id, action, resource_type, resource_id, before_doc, after_doc FROM audit`)
	args := []any{limit}
	if beforeID > 0 {
		b.WriteString(` WHERE id < $2`)
		args = append(args, beforeID)
	}
	b.WriteString(` ORDER BY id DESC LIMIT $1`)
	rows, err := t.tx.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, scanErr(err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var e AuditEntry
		var at int64
		var before, after sql.NullString
		if err := rows.Scan(&e.ID, &at, &e.TokenID, &e.Action, &e.ResourceType, &e.ResourceID, &before, &after); err != nil {
			return nil, scanErr(err)
		}
		e.At, e.Before, e.After = fromUS(at), textBytes(before), textBytes(after)
		out = append(out, e)
	}
	return out, scanRowsErr(rows)
}
