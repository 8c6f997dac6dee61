-- RCS result groups: results handed out by GET /v2/info/rcs/results, retired by the
-- complete call, or returned to the pool when their lease runs out.
CREATE TABLE report_groups (
    report_group_id TEXT PRIMARY KEY,
    client_id       TEXT NOT NULL REFERENCES clients(client_id) ON DELETE CASCADE,
    created_at      INTEGER NOT NULL,
    lease_until     INTEGER NOT NULL,   -- unix ms
    completed_at    INTEGER
) STRICT;

ALTER TABLE messages ADD COLUMN report_group_id TEXT;
ALTER TABLE messages ADD COLUMN reported INTEGER NOT NULL DEFAULT 0;

CREATE INDEX messages_unreported ON messages(client_id, uid)
    WHERE channel = 'RCS' AND reported = 0 AND status <> '100';
