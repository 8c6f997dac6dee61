-- Uploaded files: RCS images (by file_id) and MMS images (by content_group_id).
CREATE TABLE uploads (
    file_id          TEXT PRIMARY KEY,
    client_id        TEXT NOT NULL REFERENCES clients(client_id) ON DELETE CASCADE,
    kind             TEXT NOT NULL,       -- RCS | MMS
    content_group_id TEXT,                -- MMS only
    description      TEXT,
    size             INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,    -- unix ms
    expires_at       INTEGER NOT NULL     -- unix ms
) STRICT;

CREATE INDEX uploads_group ON uploads(content_group_id) WHERE content_group_id IS NOT NULL;
CREATE INDEX uploads_expiry ON uploads(expires_at);
