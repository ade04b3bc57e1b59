-- +goose Up
-- The budget alerts webhook: one row (id 1) or none. The secret is sealed.
CREATE TABLE alert_webhook (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    url           TEXT NOT NULL,
    secret_sealed BYTEA,
    updated_at    BIGINT NOT NULL
);

-- Budget alert events and their delivery (the outbox). dedupe is the
-- once-per-window key: a second insert of one key does nothing. payload is
-- the JSON body the webhook receives. state: pending, delivered, failed or
-- none (no webhook when the event was created). A pending row is due at
-- next_at and claimed by one platform replica until claimed_until.
CREATE TABLE alert_events (
    id             TEXT PRIMARY KEY,
    at             BIGINT NOT NULL,
    dedupe         TEXT NOT NULL UNIQUE,
    application_id TEXT NOT NULL,
    provider       TEXT NOT NULL,
    payload        TEXT NOT NULL,
    state          TEXT NOT NULL,
    attempts       INTEGER NOT NULL DEFAULT 0,
    last_error     TEXT NOT NULL DEFAULT '',
    next_at        BIGINT NOT NULL,
    claimed_until  BIGINT NOT NULL DEFAULT 0,
    delivered_at   BIGINT
);
CREATE INDEX alert_events_due ON alert_events (state, next_at);
CREATE INDEX alert_events_newest ON alert_events (at, id);

-- +goose Down
DROP TABLE alert_events;
DROP TABLE alert_webhook;
