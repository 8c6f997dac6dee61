-- The live store on PostgreSQL (schema kep_live): the tables of migrations/sqlite/, in
-- PostgreSQL's types.

-- Live services: only hashes of their secrets are kept (CONTRACT §0).
CREATE TABLE live_services (
    service_id            TEXT PRIMARY KEY,
    admin_ha              TEXT NOT NULL,
    service_hs            TEXT NOT NULL,
    admin_uuid            TEXT NOT NULL,
    external_verifier_url TEXT,
    created_at            BIGINT NOT NULL
);

-- Admin tokens handed out by Provision, by SHA-256 of the token.
CREATE TABLE live_tokens (
    token_hash TEXT PRIMARY KEY,
    service_id TEXT NOT NULL REFERENCES live_services(service_id) ON DELETE CASCADE,
    expires_at BIGINT NOT NULL
);
CREATE INDEX live_tokens_expires_at ON live_tokens(expires_at);

-- Server webhooks, one per service; the signing secret is kept as is.
CREATE TABLE live_webhooks (
    service_id      TEXT PRIMARY KEY REFERENCES live_services(service_id) ON DELETE CASCADE,
    url             TEXT NOT NULL,
    enabled         BOOLEAN NOT NULL,
    secret          TEXT NOT NULL,
    disabled_reason TEXT,
    updated_at      BIGINT NOT NULL
);

-- Room events written down before they are sent; `seq` orders a room's events.
CREATE TABLE live_webhook_events (
    seq          BIGINT PRIMARY KEY,
    id           TEXT NOT NULL,
    service_id   TEXT NOT NULL REFERENCES live_services(service_id) ON DELETE CASCADE,
    room_id      TEXT NOT NULL,
    event        TEXT NOT NULL,
    body         TEXT NOT NULL,
    at           BIGINT NOT NULL,
    status       TEXT NOT NULL,
    attempts     BIGINT NOT NULL DEFAULT 0,
    last_error   TEXT,
    delivered_at BIGINT
);
CREATE INDEX live_webhook_events_pending ON live_webhook_events(seq) WHERE status = 'pending';
CREATE INDEX live_webhook_events_by_service ON live_webhook_events(service_id, seq);
