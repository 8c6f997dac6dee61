-- The messaging store on PostgreSQL (schema kep_messaging): the tables of
-- migrations/sqlite/, in PostgreSQL's types. Keys that sort (uids) compare bytewise
-- (COLLATE "C"), as in SQLite, whatever the database's locale.

-- API clients (the seed's Customer ID): only the hash of the secret is kept.
CREATE TABLE clients (
    client_id   TEXT PRIMARY KEY,
    name        TEXT,
    secret_hash TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);

-- OAuth 2.0 access tokens, by SHA-256 of the token.
CREATE TABLE tokens (
    token_hash TEXT PRIMARY KEY,
    client_id  TEXT NOT NULL REFERENCES clients(client_id) ON DELETE CASCADE,
    expires_at BIGINT NOT NULL
);
CREATE INDEX tokens_by_client ON tokens(client_id);
CREATE INDEX tokens_expiry ON tokens(expires_at);

-- Every accepted message, stored before its answer is sent. `uid` sorts in issue order.
CREATE TABLE messages (
    uid             TEXT COLLATE "C" PRIMARY KEY,
    client_id       TEXT NOT NULL REFERENCES clients(client_id) ON DELETE CASCADE,
    cid             TEXT NOT NULL,
    channel         TEXT NOT NULL,          -- XMS | RCS
    message_type    TEXT NOT NULL,
    phone_number    TEXT NOT NULL,
    request         TEXT NOT NULL,          -- the accepted body, JSON, its bytes as sent
    request_hash    TEXT NOT NULL,          -- for cid idempotency
    status          TEXT NOT NULL,          -- 100 | 200 | 510 | 520
    rcs_status      TEXT,
    fallback_status TEXT,
    sms_status_code TEXT,
    error_message   TEXT,
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,        -- unix ms; the dispatcher's clock
    reg_date        BIGINT NOT NULL,        -- unix ms
    req_date        BIGINT,
    sent_date       BIGINT,
    res_date        BIGINT,
    report_group_id TEXT,
    reported        INTEGER NOT NULL DEFAULT 0,
    UNIQUE (client_id, cid)
);

-- What the dispatchers still have to do.
CREATE INDEX messages_due ON messages(next_attempt_at) WHERE status = '100';
-- Searches: a client's messages by time (uid order).
CREATE INDEX messages_client_uid ON messages(client_id, channel, uid);
CREATE INDEX messages_unreported ON messages(client_id, uid)
    WHERE channel = 'RCS' AND reported = 0 AND status <> '100';
-- The operator's views, newest first.
CREATE INDEX messages_by_phone ON messages(phone_number, uid);
CREATE INDEX messages_by_report_group ON messages(report_group_id) WHERE report_group_id IS NOT NULL;

-- What was handed to a carrier: one row per attempt (the operator's read-back).
CREATE TABLE outbox (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    uid          TEXT COLLATE "C" NOT NULL REFERENCES messages(uid) ON DELETE CASCADE,
    route        TEXT NOT NULL,             -- XMS | RCS | FALLBACK_SM | FALLBACK_LM
    phone_number TEXT NOT NULL,
    payload      TEXT NOT NULL,
    outcome      TEXT NOT NULL,
    at           BIGINT NOT NULL,
    carrier      TEXT NOT NULL
);
CREATE INDEX outbox_by_uid ON outbox(uid);

-- RCS result groups: results handed out by GET /v2/info/rcs/results, retired by the
-- complete call, or returned to the pool when their lease runs out. `seq` orders groups
-- made within one millisecond, as SQLite's rowid does.
CREATE TABLE report_groups (
    report_group_id TEXT PRIMARY KEY,
    client_id       TEXT NOT NULL REFERENCES clients(client_id) ON DELETE CASCADE,
    created_at      BIGINT NOT NULL,
    lease_until     BIGINT NOT NULL,    -- unix ms
    completed_at    BIGINT,
    seq             BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX report_groups_by_created ON report_groups(created_at, seq);
CREATE INDEX report_groups_by_client ON report_groups(client_id, created_at, seq);

-- Uploaded files: RCS images (by file_id) and MMS images (by content_group_id).
CREATE TABLE uploads (
    file_id          TEXT PRIMARY KEY,
    client_id        TEXT NOT NULL REFERENCES clients(client_id) ON DELETE CASCADE,
    kind             TEXT NOT NULL,       -- RCS | MMS
    content_group_id TEXT,                -- MMS only
    description      TEXT,
    size             BIGINT NOT NULL,
    created_at       BIGINT NOT NULL,     -- unix ms
    expires_at       BIGINT NOT NULL      -- unix ms
);
CREATE INDEX uploads_group ON uploads(content_group_id) WHERE content_group_id IS NOT NULL;
CREATE INDEX uploads_expiry ON uploads(expires_at);
CREATE INDEX uploads_by_client ON uploads(client_id);
