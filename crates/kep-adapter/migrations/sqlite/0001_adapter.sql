-- Organisation login types: what getOrgLoginType returns, and the hash of the secret key.
CREATE TABLE org_login_types (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    method        TEXT NOT NULL,
    adapter_agent TEXT NOT NULL,
    data_model    TEXT,            -- JSON object, as given
    secret_hash   TEXT NOT NULL,   -- sha256hex(secret_key)
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
) STRICT;

-- DRM release sessions (CONTRACT §2): PENDING → GRANTED | DENIED → RELEASED, or EXPIRED.
CREATE TABLE drm_sessions (
    session_id        TEXT PRIMARY KEY,
    org_login_type_id INTEGER NOT NULL REFERENCES org_login_types(id) ON DELETE CASCADE,
    file_id           TEXT NOT NULL,
    file_type         TEXT NOT NULL,     -- DRM | PLAIN
    user              TEXT,
    status            TEXT NOT NULL,
    result            TEXT,
    reason            TEXT,
    extra             TEXT,              -- JSON object
    file_size         INTEGER,
    file_sha256       TEXT,
    created_at        INTEGER NOT NULL,
    expires_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
) STRICT;

CREATE INDEX drm_sessions_open ON drm_sessions(expires_at) WHERE status IN ('PENDING', 'GRANTED');

-- Every attempt to notify the agent of a session.
CREATE TABLE drm_notifications (
    session_id TEXT NOT NULL REFERENCES drm_sessions(session_id) ON DELETE CASCADE,
    attempt    INTEGER NOT NULL,
    at         INTEGER NOT NULL,          -- unix milliseconds
    status     INTEGER,                   -- the agent's HTTP status, if it answered
    error      TEXT,                      -- why there was no answer
    PRIMARY KEY (session_id, attempt)
) STRICT;
