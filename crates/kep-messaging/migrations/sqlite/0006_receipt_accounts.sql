-- A receipt is matched by the account it answers, whichever carrier brought it: an SMPP
-- SMSC may deliver it on any session of the account (SMPP 3.4), and several carriers may
-- bind to one account (an HTTP carrier is an account alone). `carrier` stays the carrier
-- the part was handed to. A row already here has its carrier's name as its account: kep
-- moves an SMPP carrier's rows to its account when it starts (`adopt_receipts`).
-- SQLite changes a primary key by copying the table.
CREATE TABLE carrier_receipts_by_account (
    account            TEXT NOT NULL,
    carrier_message_id TEXT NOT NULL,
    carrier            TEXT NOT NULL,
    uid                TEXT NOT NULL,
    route              TEXT NOT NULL,
    attempt            INTEGER NOT NULL,
    submitted_at       INTEGER NOT NULL,    -- unix ms
    state              TEXT,                -- DELIVRD, UNDELIV, … (SMPP 3.4 receipt words)
    received_at        INTEGER,
    PRIMARY KEY (account, carrier_message_id)
) STRICT;
INSERT INTO carrier_receipts_by_account
    SELECT carrier, carrier_message_id, carrier, uid, route, attempt, submitted_at, state, received_at
    FROM carrier_receipts;
DROP TABLE carrier_receipts;
ALTER TABLE carrier_receipts_by_account RENAME TO carrier_receipts;
CREATE INDEX carrier_receipts_by_uid ON carrier_receipts(uid, route, attempt);
CREATE INDEX carrier_receipts_by_time ON carrier_receipts(submitted_at);
