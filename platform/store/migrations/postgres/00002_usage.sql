-- +goose Up
-- The usage meter (docs/meter.md): one row per record, identified by (ts, id)
-- (a resend carries both unchanged), and the hourly and daily rollups the
-- usage API answers from. Times are Unix microseconds (UTC); strings absent
-- from a record are ''. usage_records is partitioned by UTC day of ts: the
-- store creates the partitions (usage_records_pYYYYMMDD) ahead of time and
-- retention drops them (a unique key must hold the partition key, hence
-- (ts, id) rather than id alone).
CREATE TABLE usage_records (
    -- Columns ordered by alignment (8-byte, 4-byte, variable) to avoid padding.
    ts                 BIGINT NOT NULL,
    received_at        BIGINT NOT NULL,
    prompt_tokens      BIGINT NOT NULL,
    cached_tokens      BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    completion_tokens  BIGINT NOT NULL,
    reasoning_tokens   BIGINT NOT NULL,
    cost_micro_usd     BIGINT NOT NULL,
    latency_us         BIGINT NOT NULL,
    ttft_us            BIGINT NOT NULL,
    status             INTEGER NOT NULL,
    attempts           INTEGER NOT NULL,
    id                 TEXT NOT NULL,
    client_request_id  TEXT NOT NULL,
    gateway_id         TEXT NOT NULL,
    route              TEXT NOT NULL,
    provider           TEXT NOT NULL,
    application        TEXT NOT NULL,
    key_id             TEXT NOT NULL,
    requested_model    TEXT NOT NULL,
    served_model       TEXT NOT NULL,
    usage_source       TEXT NOT NULL,
    price_version      TEXT NOT NULL,
    resolution         TEXT NOT NULL,
    denied_by          TEXT NOT NULL,
    error_code         TEXT NOT NULL,
    PRIMARY KEY (ts, id)
) PARTITION BY RANGE (ts);
CREATE INDEX usage_records_application ON usage_records (application, ts);

-- bucket is the start of the hour or UTC day; status_class is status/100
-- (0: no status sent). Every ingest adds to rows in place: half of each page
-- is left free so that the update stays in its page (HOT: no new index
-- entry, the old version pruned without waiting for vacuum), which keeps a
-- daily row updated a hundred times a day from bloating the table.
CREATE TABLE usage_hourly (
    bucket             BIGINT NOT NULL,
    requests           BIGINT NOT NULL,
    prompt_tokens      BIGINT NOT NULL,
    cached_tokens      BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    completion_tokens  BIGINT NOT NULL,
    reasoning_tokens   BIGINT NOT NULL,
    cost_micro_usd     BIGINT NOT NULL,
    latency_us         BIGINT NOT NULL,
    status_class       INTEGER NOT NULL,
    application        TEXT NOT NULL,
    provider           TEXT NOT NULL,
    route              TEXT NOT NULL,
    model              TEXT NOT NULL,
    key_id             TEXT NOT NULL,
    resolution         TEXT NOT NULL,
    PRIMARY KEY (bucket, application, provider, route, model, key_id, resolution, status_class)
) WITH (fillfactor = 50);

CREATE TABLE usage_daily (
    bucket             BIGINT NOT NULL,
    requests           BIGINT NOT NULL,
    prompt_tokens      BIGINT NOT NULL,
    cached_tokens      BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    completion_tokens  BIGINT NOT NULL,
    reasoning_tokens   BIGINT NOT NULL,
    cost_micro_usd     BIGINT NOT NULL,
    latency_us         BIGINT NOT NULL,
    status_class       INTEGER NOT NULL,
    application        TEXT NOT NULL,
    provider           TEXT NOT NULL,
    route              TEXT NOT NULL,
    model              TEXT NOT NULL,
    key_id             TEXT NOT NULL,
    resolution         TEXT NOT NULL,
    PRIMARY KEY (bucket, application, provider, route, model, key_id, resolution, status_class)
) WITH (fillfactor = 50);

-- The summaries: the same without the key, resolution and status class
-- (those columns are '' and 0), kept with the tables above in one
-- transaction; queries that need none of the three read them.
CREATE TABLE usage_hourly_summary (
    bucket             BIGINT NOT NULL,
    requests           BIGINT NOT NULL,
    prompt_tokens      BIGINT NOT NULL,
    cached_tokens      BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    completion_tokens  BIGINT NOT NULL,
    reasoning_tokens   BIGINT NOT NULL,
    cost_micro_usd     BIGINT NOT NULL,
    latency_us         BIGINT NOT NULL,
    status_class       INTEGER NOT NULL,
    application        TEXT NOT NULL,
    provider           TEXT NOT NULL,
    route              TEXT NOT NULL,
    model              TEXT NOT NULL,
    key_id             TEXT NOT NULL,
    resolution         TEXT NOT NULL,
    PRIMARY KEY (bucket, application, provider, route, model, key_id, resolution, status_class)
) WITH (fillfactor = 50);

CREATE TABLE usage_daily_summary (
    bucket             BIGINT NOT NULL,
    requests           BIGINT NOT NULL,
    prompt_tokens      BIGINT NOT NULL,
    cached_tokens      BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    completion_tokens  BIGINT NOT NULL,
    reasoning_tokens   BIGINT NOT NULL,
    cost_micro_usd     BIGINT NOT NULL,
    latency_us         BIGINT NOT NULL,
    status_class       INTEGER NOT NULL,
    application        TEXT NOT NULL,
    provider           TEXT NOT NULL,
    route              TEXT NOT NULL,
    model              TEXT NOT NULL,
    key_id             TEXT NOT NULL,
    resolution         TEXT NOT NULL,
    PRIMARY KEY (bucket, application, provider, route, model, key_id, resolution, status_class)
) WITH (fillfactor = 50);

-- +goose Down
DROP TABLE usage_daily_summary;
DROP TABLE usage_hourly_summary;
DROP TABLE usage_daily;
DROP TABLE usage_hourly;
DROP TABLE usage_records;
