-- Provision nonces (step 1 hands one out, step 2 uses it up), kept here rather than in a
-- node's memory so that step 2 may reach another node than step 1 (CONTRACT §5).
CREATE TABLE live_nonces (
    nonce      TEXT PRIMARY KEY,
    service_id TEXT NOT NULL,
    issued_at  BIGINT NOT NULL       -- unix ms
);
CREATE INDEX live_nonces_issued_at ON live_nonces(issued_at);

-- The last webhook event number handed out: one counter for every node.
CREATE TABLE live_webhook_seq (last BIGINT NOT NULL);
INSERT INTO live_webhook_seq SELECT COALESCE(MAX(seq), 0) FROM live_webhook_events;
