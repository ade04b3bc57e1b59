-- +goose Up
-- Times are Unix microseconds (UTC); JSON documents are TEXT.
CREATE TABLE deployment_state (
    id      BIGINT PRIMARY KEY CHECK (id = 1),
    version BIGINT NOT NULL
);
INSERT INTO deployment_state (id, version) VALUES (1, 1);

CREATE TABLE admin_tokens (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    hash       TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);

CREATE TABLE providers (
    id             TEXT PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE,
    type           TEXT NOT NULL,
    url            TEXT NOT NULL,
    targets        TEXT NOT NULL,
    auth_header    TEXT NOT NULL,
    api_key_sealed BYTEA,
    rate_limits    TEXT NOT NULL,
    rate_limits_rev BIGINT NOT NULL,
    guardrails_rev BIGINT NOT NULL,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL
);

CREATE TABLE applications (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
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
    created_at     BIGINT NOT NULL,
    expires_at     BIGINT,
    revoked_at     BIGINT,
    last_used_at   BIGINT
);
CREATE INDEX api_keys_application ON api_keys (application_id);

CREATE TABLE guardrails (
    id          TEXT PRIMARY KEY,
    provider_id TEXT NOT NULL REFERENCES providers (id) ON DELETE CASCADE,
    position    BIGINT NOT NULL,
    name        TEXT NOT NULL,
    version     TEXT NOT NULL,
    params      TEXT NOT NULL,
    rev         BIGINT NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);
CREATE INDEX guardrails_provider ON guardrails (provider_id, position);

CREATE TABLE gateways (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    token_hash      TEXT UNIQUE,
    created_at      BIGINT NOT NULL,
    revoked_at      BIGINT,
    applied_version BIGINT NOT NULL,
    applied_at      BIGINT,
    last_version    BIGINT NOT NULL,
    last_result     TEXT NOT NULL,
    last_error      TEXT NOT NULL,
    last_seen_at    BIGINT
);

CREATE TABLE audit (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at            BIGINT NOT NULL,
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
