// Package store is the platform's persistent state: providers (with sealed
// upstream keys), applications and their provider grants, API keys (hashes
// only), per-provider Rate Limit settings and guardrails, gateways, admin
// tokens, the deployment version, the audit log, and the usage meter's raw
// records and rollups. It may import only the standard library, the SQL
// drivers, the migration library and the usage record (package meter, a
// leaf); it knows nothing of HTTP, the deployment document or the gateway.
//
// One implementation over database/sql runs on SQLite (modernc.org/sqlite,
// embedded, the default) and PostgreSQL (pgx). Migrations are versioned
// goose files embedded per dialect (migrations/sqlite, migrations/postgres;
// they differ only in column types and the audit id) and are applied by
// Open. Every operation runs inside Read or Write, one database transaction:
// a multi-row change is all or nothing.
//
// The query layer is hand-written rather than generated (sqlc): the SQL is
// the same text on both engines (PostgreSQL's $1 placeholders are accepted by
// SQLite), every query lives in queries.go (the usage meter's in usage.go),
// and the schema is small. sqlc
// would need cgo (pg_query) at generation time and would generate one Go
// package per engine for the same queries, doubling the code to keep in
// step. The store test suite runs every operation against both engines.
//
// Times are stored as Unix microseconds, UTC; JSON documents (Rate Limit
// settings, guardrail params, audit before/after) as text the store does not
// interpret.
package store

import (
	"context"
	"errors"
	"time"
)

// Errors returned by Tx methods; compare with errors.Is.
var (
	// ErrNotFound: the row does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a unique value (name, key hash, token hash) is taken.
	ErrConflict = errors.New("conflict")
	// ErrStale: a conditional update found another revision than expected.
	ErrStale = errors.New("stale revision")
)

// Store opens transactions. Implementations are safe for concurrent use.
type Store interface {
	// Read runs fn in a read-only transaction that sees one consistent
	// snapshot. fn must not write.
	Read(ctx context.Context, fn func(Tx) error) error
	// Write runs fn in a read-write transaction, committed when fn returns
	// nil and rolled back otherwise (fn's error is returned). Writes are
	// serialised.
	Write(ctx context.Context, fn func(Tx) error) error
	// Dialect names the engine: "sqlite" or "postgres".
	Dialect() string

	// EnsureUsagePartitions makes sure raw usage records dated in the UTC
	// days from from to to (inclusive) can be inserted: on PostgreSQL it
	// creates the missing daily partitions (safe to call from several
	// replicas at once); on SQLite it does nothing.
	EnsureUsagePartitions(ctx context.Context, from, to time.Time) error
	// DeleteUsageBefore removes raw usage records dated before cutoff, in
	// transactions of its own: PostgreSQL drops every daily partition whose
	// whole day is before cutoff (a day's records go together, once the last
	// of them is older); SQLite deletes them in batches. Rollups are kept.
	DeleteUsageBefore(ctx context.Context, cutoff time.Time) (UsageDeletion, error)
	Close() error
}

// Tx is one transaction. Its methods must not be used after Read or Write
// returned. List methods return rows ordered as documented per method.
type Tx interface {
	// Version is the deployment version: it increases by one at every
	// change of what gateways serve (BumpVersion, in the same transaction).
	Version(ctx context.Context) (int64, error)
	BumpVersion(ctx context.Context) (int64, error)
	// Counters is the sealed counters setting of the generated deployments
	// (nil: none was ever set, or it was cleared); SetCounters replaces it.
	// The store does not interpret the value: a change of what gateways
	// serve, it goes with BumpVersion in the same transaction.
	Counters(ctx context.Context) ([]byte, error)
	SetCounters(ctx context.Context, sealed []byte) error

	// Admin tokens.
	AdminTokenByHash(ctx context.Context, hash string) (AdminToken, error)
	CountAdminTokens(ctx context.Context) (int, error)
	InsertAdminToken(ctx context.Context, t AdminToken) error
	// SetAdminTokenHash replaces the hash of token id, creating the token
	// when it does not exist.
	SetAdminTokenHash(ctx context.Context, t AdminToken) error

	// Providers, ordered by name.
	ListProviders(ctx context.Context) ([]Provider, error)
	GetProvider(ctx context.Context, id string) (Provider, error)
	InsertProvider(ctx context.Context, p Provider) error
	// UpdateProvider writes every column but the revisions and created_at.
	UpdateProvider(ctx context.Context, p Provider) error
	DeleteProvider(ctx context.Context, id string) error
	// SetRateLimits replaces provider id's settings when their revision is
	// ifRev (ErrStale otherwise) and returns the new revision.
	SetRateLimits(ctx context.Context, id string, settings []byte, ifRev int64, at time.Time) (int64, error)
	// BumpGuardrailsRev increases provider id's guardrail list revision when
	// it is ifRev (ErrStale otherwise; ifRev < 0 skips the check) and
	// returns the new one.
	BumpGuardrailsRev(ctx context.Context, id string, ifRev int64) (int64, error)

	// Applications, ordered by name then id, with their provider ids sorted.
	ListApplications(ctx context.Context) ([]Application, error)
	GetApplication(ctx context.Context, id string) (Application, error)
	InsertApplication(ctx context.Context, a Application) error
	UpdateApplication(ctx context.Context, a Application) error
	DeleteApplication(ctx context.Context, id string) error

	// API keys, ordered by creation then id.
	ListKeys(ctx context.Context, applicationID string) ([]APIKey, error)
	// ListUsableKeys lists every key that is neither revoked nor expired at
	// now, of every application.
	ListUsableKeys(ctx context.Context, now time.Time) ([]APIKey, error)
	GetKey(ctx context.Context, applicationID, id string) (APIKey, error)
	InsertKey(ctx context.Context, k APIKey) error
	RevokeKey(ctx context.Context, applicationID, id string, at time.Time) error
	// TouchKeys raises each key's last use to the given time (never lowers
	// it); unknown ids are ignored.
	TouchKeys(ctx context.Context, lastUsed map[string]time.Time) error

	// Guardrails, ordered by position.
	ListGuardrails(ctx context.Context, providerID string) ([]Guardrail, error)
	// ListAllGuardrails is every provider's guardrails, by provider then position.
	ListAllGuardrails(ctx context.Context) ([]Guardrail, error)
	GetGuardrail(ctx context.Context, providerID, id string) (Guardrail, error)
	InsertGuardrail(ctx context.Context, g Guardrail) error
	// UpdateGuardrail replaces name, version, params and position when the
	// revision is ifRev (ErrStale otherwise) and returns the new revision.
	UpdateGuardrail(ctx context.Context, g Guardrail, ifRev int64) (int64, error)
	DeleteGuardrail(ctx context.Context, providerID, id string) error
	// SetGuardrailPositions numbers the provider's guardrails 0.. in the
	// order of ids, which must list each of them exactly once.
	SetGuardrailPositions(ctx context.Context, providerID string, ids []string) error

	// Gateways, ordered by name then id.
	ListGateways(ctx context.Context) ([]Gateway, error)
	GetGateway(ctx context.Context, id string) (Gateway, error)
	GatewayByTokenHash(ctx context.Context, hash string) (Gateway, error)
	InsertGateway(ctx context.Context, g Gateway) error
	RevokeGateway(ctx context.Context, id string, at time.Time) error
	// ReportGateway records a check-in: always last_seen_at, last_version,
	// last_result and last_error; applied_version and applied_at when the
	// result is "applied".
	ReportGateway(ctx context.Context, id string, r Report) error

	// Usage records and rollups (usage.go).
	//
	// InsertUsageRecords inserts each record whose (Time, ID) is not stored
	// yet and reports which it inserted (inserted[i] for recs[i]); a record
	// stored before, or earlier in recs, is skipped. Rows are inserted in the
	// order of recs: callers sort them by (Time, ID) so that concurrent
	// inserts of overlapping batches wait for each other in one order and
	// never deadlock.
	InsertUsageRecords(ctx context.Context, recs []UsageRecord) (inserted []bool, err error)
	// AddUsageRollups adds each row's totals to the stored row of the same
	// bucket and dimensions (creating it). Callers sort rows by bucket and
	// dimensions, for the same reason.
	AddUsageRollups(ctx context.Context, g Granularity, rows []UsageRollup) error
	// QueryUsage sums the rollups of q, ordered by bucket then the grouped
	// dimensions.
	QueryUsage(ctx context.Context, q UsageQuery) ([]UsageRollup, error)
	// ListUsageRecords returns at most q.Limit raw records, newest first.
	ListUsageRecords(ctx context.Context, q RecordQuery) ([]UsageRecord, error)
	// MeteredUsage sums provider's raw records with from <= ts < to that
	// have a usage source (the request reached the provider's model), by
	// application and served model (the requested model when the record
	// has none), ordered by both.
	MeteredUsage(ctx context.Context, provider string, from, to time.Time) ([]MeteredUsage, error)

	// Budget alerts (alerts.go).
	AlertTx

	// Audit log, newest first.
	InsertAudit(ctx context.Context, e AuditEntry) (int64, error)
	// ListAudit returns at most limit entries with ids below beforeID (0:
	// from the newest).
	ListAudit(ctx context.Context, beforeID int64, limit int) ([]AuditEntry, error)
}

// AdminToken authenticates the admin API. Only its SHA-256 hash is stored.
type AdminToken struct {
	ID        string
	Name      string
	Hash      string
	CreatedAt time.Time
	RevokedAt *time.Time
}

// Provider is an upstream API.
type Provider struct {
	ID   string
	Name string
	// Type is "openai" or "anthropic".
	Type    string
	URL     string
	Targets []string
	// AuthHeader is the header the upstream key goes in ("" for the type's
	// default).
	AuthHeader string
	// ForwardHeaders are the client headers forwarded upstream besides the
	// default ones (deployment.Provider.ForwardHeaders; nil: none).
	ForwardHeaders []string
	// ApplicationHeader is the header that carries the caller's
	// application id upstream ("": none).
	ApplicationHeader string
	// UsageReportURL answers the provider's usage report (reconciliation;
	// "": none).
	UsageReportURL string
	// APIKeySealed is the upstream key, encrypted (platform/secrets); nil
	// when the provider has none.
	APIKeySealed []byte
	// RateLimits is the Rate Limit settings document (JSON; empty for none)
	// and RateLimitsRev its revision, the ETag of optimistic concurrency.
	RateLimits    []byte
	RateLimitsRev int64
	// GuardrailsRev is the revision of the provider's guardrail list.
	GuardrailsRev int64
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// Application is an API consumer.
type Application struct {
	ID   string
	Name string
	// Providers are the ids of the providers it may call, sorted.
	Providers []string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// APIKey is one key of an application. The key itself is never stored.
type APIKey struct {
	ID            string
	ApplicationID string
	// Prefix is the key's first characters, shown to tell keys apart.
	Prefix string
	// Hash is the configured form "sha256:<hex>".
	Hash       string
	CreatedAt  time.Time
	ExpiresAt  *time.Time
	RevokedAt  *time.Time
	LastUsedAt *time.Time
}

// Guardrail is a raw policy entry appended to a provider's generated chain.
type Guardrail struct {
	ID         string
	ProviderID string
	Position   int
	Name       string
	Version    string
	// Params is a JSON object.
	Params    []byte
	Rev       int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Gateway is a registered data-plane instance.
type Gateway struct {
	ID   string
	Name string
	// TokenHash is the SHA-256 of its token; "" for a gateway without one
	// (the in-process gateway of `sluice serve`).
	TokenHash      string
	CreatedAt      time.Time
	RevokedAt      *time.Time
	AppliedVersion int64
	AppliedAt      *time.Time
	LastVersion    int64
	// LastResult is "applied", "failed" or "" (never reported).
	LastResult string
	LastError  string
	LastSeenAt *time.Time
}

// Report is one gateway check-in.
type Report struct {
	Version int64
	Result  string
	Error   string
	At      time.Time
}

// AuditEntry is one admin change. Before and After are JSON documents with
// secrets already redacted (nil when absent).
type AuditEntry struct {
	ID           int64
	At           time.Time
	TokenID      string
	Action       string
	ResourceType string
	ResourceID   string
	Before       []byte
	After        []byte
}
