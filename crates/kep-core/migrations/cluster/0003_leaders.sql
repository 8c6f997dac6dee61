-- Which node leads each role (the serving runtime): written by the node that holds the
-- role's advisory lock, so the others know whom to ask. The lock, not this row, decides.
CREATE TABLE leaders (
    role    TEXT PRIMARY KEY,
    node_id TEXT NOT NULL
);
