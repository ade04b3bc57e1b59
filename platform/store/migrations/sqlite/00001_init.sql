-- +goose Up
-- Times are Unix microseconds (UTC); JSON documents are TEXT.
CREATE TABLE deployment_state (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
);
INSERT INTO deployment_state (id, version) VALUES (1, 1);

CREATE TABLE admin_tokens (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    hash       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);

CREATE TABLE providers (
    id             TEXT PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE,
    type           TEXT NOT NULL,
    url            TEXT NOT NULL,
    targets        TEXT NOT NULL,
    auth_header    TEXT NOT NULL,
    api_key_sealed BLOB,
    rate_limits    TEXT NOT NULL,
    rate_limits_rev INTEGER NOT NULL,
    guardrails_rev INTEGER NOT NULL,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);

CREATE TABLE applications (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

CREATE TABLE application_providers (
    application_id TEXT NOT NULL REFERENCES applications (id) ON DELETE CASCADE,
    provider_id    TEXT NOT NULL REFERENCES providers (id) ON DELETE CASCADE,
    PRIMARY KEY (application_id, provider_id)
);
CREATE INDEX application_providers_provider ON application_providers (provider_id);

CREATE TABLE api_keys (
    id             TEXT PRIMARY KEY,
    application_id TEXT NOT NULL REFERENCES applications (id) ON DELETE CASCADE,
    prefix         TEXT NOT NULL,
    hash           TEXT NOT NULL UNIQUE,
    created_at     INTEGER NOT NULL,
    expires_at     INTEGER,
    revoked_at     INTEGER,
    last_used_at   INTEGER
);
CREATE INDEX api_keys_application ON api_keys (application_id);

CREATE TABLE guardrails (
    id          TEXT PRIMARY KEY,
    provider_id TEXT NOT NULL REFERENCES providers (id) ON DELETE CASCADE,
    position    INTEGER NOT NULL,
    name        TEXT NOT NULL,
    version     TEXT NOT NULL,
    params      TEXT NOT NULL,
    rev         INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE INDEX guardrails_provider ON guardrails (provider_id, position);

CREATE TABLE gateways (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    token_hash      TEXT UNIQUE,
    created_at      INTEGER NOT NULL,
    revoked_at      INTEGER,
    applied_version INTEGER NOT NULL,
    applied_at      INTEGER,
    last_version    INTEGER NOT NULL,
    last_result     TEXT NOT NULL,
    last_error      TEXT NOT NULL,
    last_seen_at    INTEGER
);

CREATE TABLE audit (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    at            INTEGER NOT NULL,
    token_id      TEXT NOT NULL,
    action        TEXT NOT NULL,
    resource_type TEXT NOT NULL,
    resource_id   TEXT NOT NULL,
    before_doc    TEXT,
    after_doc     TEXT
);

-- +goose Down
DROP TABLE audit;
DROP TABLE gateways;
DROP TABLE guardrails;
DROP TABLE api_keys;
DROP TABLE application_providers;
DROP TABLE applications;
DROP TABLE providers;
DROP TABLE admin_tokens;
DROP TABLE deployment_state;
