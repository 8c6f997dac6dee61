-- Hand-overs a carrier acknowledged and whose delivery receipts are awaited: one row per
-- submitted part, keyed by the id the carrier gave it. A receipt fills in `state`; the
-- message's last attempt on a route is decided once every part of it has one. Rows stay
-- after the message is final (a late receipt finds it final and is dropped) until the sweep.
CREATE TABLE carrier_receipts (
    carrier            TEXT NOT NULL,
    carrier_message_id TEXT NOT NULL,
    uid                TEXT COLLATE "C" NOT NULL,
    route              TEXT NOT NULL,
    attempt            BIGINT NOT NULL,
    submitted_at       BIGINT NOT NULL,    -- unix ms
    state              TEXT,                -- DELIVRD, UNDELIV, … (SMPP 3.4 receipt words)
    received_at        BIGINT,
    PRIMARY KEY (carrier, carrier_message_id)
);
CREATE INDEX carrier_receipts_by_uid ON carrier_receipts(uid, route, attempt);
CREATE INDEX carrier_receipts_by_time ON carrier_receipts(submitted_at);
