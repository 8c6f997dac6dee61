-- The kep nodes sharing this database (CONTRACT §5): each beats every second; times are
-- the database's clock in unix ms, so nodes' clocks need not agree. A node's slot (0 to 99)
-- sets it apart where nodes make ids of their own (message uids); the slot of a node gone
-- for ten minutes is free again.
CREATE TABLE nodes (
    node_id    TEXT PRIMARY KEY,
    slot       INTEGER NOT NULL UNIQUE,
    started_at BIGINT NOT NULL,
    seen_at    BIGINT NOT NULL
);
