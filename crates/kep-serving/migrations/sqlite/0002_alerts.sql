-- Alerts to an endpoint's incoming webhook (seed 001 "Events", CONTRACT §3).
CREATE TABLE alert_settings (
    endpoint TEXT PRIMARY KEY REFERENCES endpoints (name) ON DELETE CASCADE,
    settings TEXT NOT NULL            -- JSON: the settings as PUT
);

-- Every alert raised, with the webhook it goes to: a pending one is queued again when
-- kep starts, so a restart loses none.
CREATE TABLE alerts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    endpoint TEXT NOT NULL REFERENCES endpoints (name) ON DELETE CASCADE,
    deployment TEXT,
    condition TEXT NOT NULL,
    text TEXT NOT NULL,
    webhook_url TEXT NOT NULL,
    status TEXT NOT NULL,             -- pending | sent | failed
    attempts INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    at_ms INTEGER NOT NULL,
    sent_at_ms INTEGER
);
CREATE INDEX alerts_endpoint ON alerts (endpoint, id);
CREATE INDEX alerts_pending ON alerts (id) WHERE status = 'pending';
