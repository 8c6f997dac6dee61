-- Live services: only hashes of their secrets are kept (CONTRACT §0).
CREATE TABLE live_services (
    service_id            TEXT PRIMARY KEY,
    -- sha256hex(serviceId:adminSecret), all the provision check needs
    admin_ha              TEXT NOT NULL,
    -- sha256hex(serviceId:serviceSecret), all the participant join check needs
    service_hs            TEXT NOT NULL,
    -- the "uuid" of every provision result: the service's admin user
    admin_uuid            TEXT NOT NULL,
    external_verifier_url TEXT,
    created_at            INTEGER NOT NULL
) STRICT;

-- Admin tokens handed out by Provision, by SHA-256 of the token.
CREATE TABLE live_tokens (
    token_hash TEXT PRIMARY KEY,
    service_id TEXT NOT NULL REFERENCES live_services(service_id) ON DELETE CASCADE,
    expires_at INTEGER NOT NULL
) STRICT;

CREATE INDEX live_tokens_expires_at ON live_tokens(expires_at);
