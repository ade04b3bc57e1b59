-- +goose Up
-- The summary of the denied requests alone (resolution 'denied', key '' and
-- status class 0), kept with the other rollups in one transaction, so that
-- the console's denials are answered from a table of their own rather than
-- from the full tables (store.rollupTable). What was stored before comes
-- from the full tables.
-- The same columns and key as the summary tables.
CREATE TABLE usage_hourly_denied (LIKE usage_hourly_summary INCLUDING ALL) WITH (fillfactor = 50);
CREATE TABLE usage_daily_denied (LIKE usage_daily_summary INCLUDING ALL) WITH (fillfactor = 50);

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
