-- +goose Up
-- The usage meter (docs/meter.md): one row per record, identified by (ts, id)
-- (a resend carries both unchanged), and the hourly and daily rollups the
-- usage API answers from. Times are Unix microseconds (UTC); strings absent
-- from a record are ''. WITHOUT ROWID: the primary key is the table's only
-- b-tree, clustered by time, so a retention DELETE takes a prefix.
CREATE TABLE usage_records (
    ts                 INTEGER NOT NULL,
    id                 TEXT NOT NULL,
    received_at        INTEGER NOT NULL,
    client_request_id  TEXT NOT NULL,
    gateway_id         TEXT NOT NULL,
    route              TEXT NOT NULL,
    provider           TEXT NOT NULL,
    application        TEXT NOT NULL,
    key_id             TEXT NOT NULL,
    requested_model    TEXT NOT NULL,
    served_model       TEXT NOT NULL,
    prompt_tokens      INTEGER NOT NULL,
    cached_tokens      INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    completion_tokens  INTEGER NOT NULL,
    reasoning_tokens   INTEGER NOT NULL,
    usage_source       TEXT NOT NULL,
    cost_micro_usd     INTEGER NOT NULL,
    price_version      TEXT NOT NULL,
    resolution         TEXT NOT NULL,
    denied_by          TEXT NOT NULL,
    error_code         TEXT NOT NULL,
    status             INTEGER NOT NULL,
    latency_us         INTEGER NOT NULL,
    ttft_us            INTEGER NOT NULL,
    attempts           INTEGER NOT NULL,
    PRIMARY KEY (ts, id)
) WITHOUT ROWID;
CREATE INDEX usage_records_application ON usage_records (application, ts);

-- bucket is the start of the hour or UTC day; status_class is status/100
-- (0: no status sent).
CREATE TABLE usage_hourly (
    bucket             INTEGER NOT NULL,
    application        TEXT NOT NULL,
    provider           TEXT NOT NULL,
    route              TEXT NOT NULL,
    model              TEXT NOT NULL,
    key_id             TEXT NOT NULL,
    resolution         TEXT NOT NULL,
    status_class       INTEGER NOT NULL,
    requests           INTEGER NOT NULL,
    prompt_tokens      INTEGER NOT NULL,
    cached_tokens      INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    completion_tokens  INTEGER NOT NULL,
    reasoning_tokens   INTEGER NOT NULL,
    cost_micro_usd     INTEGER NOT NULL,
    latency_us         INTEGER NOT NULL,
    PRIMARY KEY (bucket, application, provider, route, model, key_id, resolution, status_class)
) WITHOUT ROWID;

CREATE TABLE usage_daily (
    bucket             INTEGER NOT NULL,
    application        TEXT NOT NULL,
    provider           TEXT NOT NULL,
    route              TEXT NOT NULL,
    model              TEXT NOT NULL,
    key_id             TEXT NOT NULL,
    resolution         TEXT NOT NULL,
    status_class       INTEGER NOT NULL,
    requests           INTEGER NOT NULL,
    prompt_tokens      INTEGER NOT NULL,
    cached_tokens      INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    completion_tokens  INTEGER NOT NULL,
    reasoning_tokens   INTEGER NOT NULL,
    cost_micro_usd     INTEGER NOT NULL,
    latency_us         INTEGER NOT NULL,
    PRIMARY KEY (bucket, application, provider, route, model, key_id, resolution, status_class)
) WITHOUT ROWID;

-- The summaries: the same without the key, resolution and status class
-- (those columns are '' and 0), kept with the tables above in one
-- transaction; queries that need none of the three read them.
CREATE TABLE usage_hourly_summary (
    bucket             INTEGER NOT NULL,
    application        TEXT NOT NULL,
    provider           TEXT NOT NULL,
    route              TEXT NOT NULL,
    model              TEXT NOT NULL,
    key_id             TEXT NOT NULL,
    resolution         TEXT NOT NULL,
    status_class       INTEGER NOT NULL,
    requests           INTEGER NOT NULL,
    prompt_tokens      INTEGER NOT NULL,
    cached_tokens      INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    completion_tokens  INTEGER NOT NULL,
    reasoning_tokens   INTEGER NOT NULL,
    cost_micro_usd     INTEGER NOT NULL,
    latency_us         INTEGER NOT NULL,
    PRIMARY KEY (bucket, application, provider, route, model, key_id, resolution, status_class)
) WITHOUT ROWID;

CREATE TABLE usage_daily_summary (
    bucket             INTEGER NOT NULL,
    application        TEXT NOT NULL,
    provider           TEXT NOT NULL,
    route              TEXT NOT NULL,
    model              TEXT NOT NULL,
    key_id             TEXT NOT NULL,
    resolution         TEXT NOT NULL,
    status_class       INTEGER NOT NULL,
    requests           INTEGER NOT NULL,
    prompt_tokens      INTEGER NOT NULL,
    cached_tokens      INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    completion_tokens  INTEGER NOT NULL,
    reasoning_tokens   INTEGER NOT NULL,
    cost_micro_usd     INTEGER NOT NULL,
    latency_us         INTEGER NOT NULL,
    PRIMARY KEY (bucket, application, provider, route, model, key_id, resolution, status_class)
) WITHOUT ROWID;

-- +goose Down
DROP TABLE usage_daily_summary;
DROP TABLE usage_hourly_summary;
DROP TABLE usage_daily;
DROP TABLE usage_hourly;
DROP TABLE usage_records;
