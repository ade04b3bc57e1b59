-- +goose Up
-- A provider's client headers forwarded upstream (JSON array), the header
-- that carries the caller's application id upstream, and the URL of its
-- usage report (reconciliation); empty: none.
ALTER TABLE providers ADD COLUMN forward_headers TEXT NOT NULL DEFAULT '[]';
ALTER TABLE providers ADD COLUMN application_header TEXT NOT NULL DEFAULT '';
ALTER TABLE providers ADD COLUMN usage_report_url TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE providers DROP COLUMN usage_report_url;
ALTER TABLE providers DROP COLUMN application_header;
ALTER TABLE providers DROP COLUMN forward_headers;
