-- The upload records (docs/architecture.md, "Upload records"): one row per
-- grant, and per tenant and minute the signers' tallies. Applied by the
-- operator step (deploy/streams), never by a service: the services' role
-- (deploy/postgres/grants.sql) reads and writes rows only.

-- +goose Up
CREATE SCHEMA IF NOT EXISTS mintgate;

CREATE TABLE mintgate.uploads (
    url_id          uuid PRIMARY KEY,
    tenant          text NOT NULL,
    subject         text NOT NULL DEFAULT '',
    key             text NOT NULL DEFAULT '',
    content_type    text NOT NULL DEFAULT '',
    content_length  bigint,
    multipart       boolean NOT NULL DEFAULT false,
    checksum_sha256 text,
    filename        text,
    status          text NOT NULL CHECK (status IN ('issued', 'verifying', 'completed', 'rejected', 'refunded', 'aborted')),
    reason          text,
    size            bigint,
    issued_at       timestamptz,
    expires_at      timestamptz,
    ended_at        timestamptz
);

-- GET /uploads: a caller's rows newest first, keyset on (issued_at, url_id),
-- with or without ?status=.
CREATE INDEX uploads_caller_newest ON mintgate.uploads (tenant, subject, issued_at DESC, url_id DESC);
CREATE INDEX uploads_caller_status_newest ON mintgate.uploads (tenant, subject, status, issued_at DESC, url_id DESC);
-- The usage routes: counts by status and completed bytes, from the index alone.
CREATE INDEX uploads_tenant_usage ON mintgate.uploads (tenant, status) INCLUDE (subject, size);

CREATE TABLE mintgate.tenant_minutes (
    tenant         text NOT NULL,
    minute         timestamptz NOT NULL,
    signs          bigint NOT NULL DEFAULT 0,
    refused_caller bigint NOT NULL DEFAULT 0,
    refused_tenant bigint NOT NULL DEFAULT 0,
    refused_other  bigint NOT NULL DEFAULT 0,
    refunds        bigint NOT NULL DEFAULT 0,
    rejections     bigint NOT NULL DEFAULT 0,
    bytes_granted  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, minute)
);
-- at-ceiling: the minutes of a window, in time order.
CREATE INDEX tenant_minutes_minute ON mintgate.tenant_minutes (minute) INCLUDE (tenant, signs, refused_caller, refused_tenant, refused_other);

-- The tallies applied (one per signer instance and minute): a replay of
-- one adds nothing.
CREATE TABLE mintgate.tallies_applied (
    id         text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE mintgate.tallies_applied;
DROP TABLE mintgate.tenant_minutes;
DROP TABLE mintgate.uploads;
