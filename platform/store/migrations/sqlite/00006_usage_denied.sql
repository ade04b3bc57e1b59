-- +goose Up
-- The summary of the denied requests alone (resolution 'denied', key '' and
-- status class 0), kept with the other rollups in one transaction, so that
-- the console's denials are answered from a table of their own rather than
-- from the full tables (store.rollupTable). What was stored before comes
-- from the full tables.
CREATE TABLE usage_hourly_denied (
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

CREATE TABLE usage_daily_denied (
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

INSERT INTO usage_hourly_denied (bucket, application, provider, route, model, key_id, resolution, status_class,
    requests, prompt_tokens, cached_tokens, cache_write_tokens, completion_tokens, reasoning_tokens, cost_micro_usd, latency_us)
SELECT bucket, application, provider, route, model, '', resolution, 0,
    SUM(requests), SUM(prompt_tokens), SUM(cached_tokens), SUM(cache_write_tokens), SUM(completion_tokens),
    SUM(reasoning_tokens), SUM(cost_micro_usd), SUM(latency_us)
FROM usage_hourly WHERE resolution = 'denied'
GROUP BY bucket, application, provider, route, model, resolution;

INSERT INTO usage_daily_denied (bucket, application, provider, route, model, key_id, resolution, status_class,
    requests, prompt_tokens, cached_tokens, cache_write_tokens, completion_tokens, reasoning_tokens, cost_micro_usd, latency_us)
SELECT bucket, application, provider, route, model, '', resolution, 0,
    SUM(requests), SUM(prompt_tokens), SUM(cached_tokens), SUM(cache_write_tokens), SUM(completion_tokens),
    SUM(reasoning_tokens), SUM(cost_micro_usd), SUM(latency_us)
FROM usage_daily WHERE resolution = 'denied'
GROUP BY bucket, application, provider, route, model, resolution;

-- +goose Down
DROP TABLE usage_daily_denied;
DROP TABLE usage_hourly_denied;
