-- +goose Up
-- The counters section of every generated deployment, sealed (it may carry a
-- Redis password); NULL: none (each gateway counts in memory).
ALTER TABLE deployment_state ADD COLUMN counters_sealed BLOB;

-- +goose Down
ALTER TABLE deployment_state DROP COLUMN counters_sealed;
