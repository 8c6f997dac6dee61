-- Server webhooks (CONTRACT §1): one per live service. The signing secret is kept as is:
-- each delivery is signed with it.
CREATE TABLE live_webhooks (
    service_id      TEXT PRIMARY KEY REFERENCES live_services(service_id) ON DELETE CASCADE,
    url             TEXT NOT NULL,
    enabled         INTEGER NOT NULL,
    secret          TEXT NOT NULL,
    -- why kep turned it off (the receiver answered 410), until it is set again
    disabled_reason TEXT,
    updated_at      INTEGER NOT NULL
) STRICT;

-- Every room event for a service with its webhook on, written down before it is sent:
-- pending until delivered or given up (failed). `seq` orders a room's events.
CREATE TABLE live_webhook_events (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT NOT NULL,
    service_id   TEXT NOT NULL REFERENCES live_services(service_id) ON DELETE CASCADE,
    room_id      TEXT NOT NULL,
    event        TEXT NOT NULL,
    body         TEXT NOT NULL,
    at           INTEGER NOT NULL,        -- unix ms, when the change happened
    status       TEXT NOT NULL,           -- pending | delivered | failed
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT,
    delivered_at INTEGER
) STRICT;

CREATE INDEX live_webhook_events_pending ON live_webhook_events(seq) WHERE status = 'pending';
CREATE INDEX live_webhook_events_by_service ON live_webhook_events(service_id, seq);
