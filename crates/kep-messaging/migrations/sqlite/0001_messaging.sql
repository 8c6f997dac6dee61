-- API clients (the seed's Customer ID): only the hash of the secret is kept.
CREATE TABLE clients (
    client_id   TEXT PRIMARY KEY,
    name        TEXT,
    secret_hash TEXT NOT NULL,
    created_at  INTEGER NOT NULL
) STRICT;

-- OAuth 2.0 access tokens, by SHA-256 of the token.
CREATE TABLE tokens (
    token_hash TEXT PRIMARY KEY,
    client_id  TEXT NOT NULL REFERENCES clients(client_id) ON DELETE CASCADE,
    expires_at INTEGER NOT NULL
) STRICT;

-- Every accepted message, stored before its answer is sent. `uid` sorts in issue order.
CREATE TABLE messages (
    uid             TEXT PRIMARY KEY,
    client_id       TEXT NOT NULL REFERENCES clients(client_id) ON DELETE CASCADE,
    cid             TEXT NOT NULL,
    channel         TEXT NOT NULL,          -- XMS | RCS
    message_type    TEXT NOT NULL,
    phone_number    TEXT NOT NULL,
    request         TEXT NOT NULL,          -- the accepted body, JSON
    request_hash    TEXT NOT NULL,          -- for cid idempotency
    status          TEXT NOT NULL,          -- 100 | 200 | 510 | 520
    rcs_status      TEXT,
    fallback_status TEXT,
    sms_status_code TEXT,
    error_message   TEXT,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,       -- unix ms; the dispatcher's clock
    reg_date        INTEGER NOT NULL,       -- unix ms
    req_date        INTEGER,
    sent_date       INTEGER,
    res_date        INTEGER,
    UNIQUE (client_id, cid)
) STRICT;

-- What the dispatcher still has to do.
CREATE INDEX messages_due ON messages(next_attempt_at) WHERE status = '100';
-- Searches: a client's messages by time (uid order).
CREATE INDEX messages_client_uid ON messages(client_id, channel, uid);

-- What was handed to the carrier: one row per attempt (the operator's read-back).
CREATE TABLE outbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    uid         TEXT NOT NULL REFERENCES messages(uid) ON DELETE CASCADE,
    route       TEXT NOT NULL,              -- XMS | RCS | FALLBACK_SM | FALLBACK_LM
    phone_number TEXT NOT NULL,
    payload     TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    at          INTEGER NOT NULL
) STRICT;
