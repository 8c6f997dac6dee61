-- Model serving (seed 001 part B). Images and models are soft-deleted: a deployment keeps
-- what it was created from, but cannot be edited once its source is gone.
CREATE TABLE images (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    command TEXT NOT NULL,            -- JSON array of argv words
    created_at INTEGER NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX images_name ON images (name) WHERE deleted = 0;

CREATE TABLE models (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    framework TEXT NOT NULL,
    path TEXT NOT NULL,
    size INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX models_name ON models (name) WHERE deleted = 0;

CREATE TABLE endpoints (
    name TEXT PRIMARY KEY,
    description TEXT,
    instance_type TEXT NOT NULL,
    instance_count INTEGER NOT NULL,
    protocol TEXT NOT NULL,
    key_hash TEXT NOT NULL,
    mirroring INTEGER NOT NULL DEFAULT 0,
    responder TEXT,
    created_at INTEGER NOT NULL
);

CREATE TABLE deployments (
    endpoint TEXT NOT NULL REFERENCES endpoints (name) ON DELETE CASCADE,
    name TEXT NOT NULL,
    position INTEGER NOT NULL,        -- creation order, for `--ratio`
    spec TEXT NOT NULL,               -- JSON: the resolved deployment spec
    weight INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (endpoint, name)
);

-- Every instance process kep started and has not yet seen end: what a restarted kep
-- reconciles. `start_ticks` tells a live process of ours from a reused pid.
CREATE TABLE processes (
    instance TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    start_ticks INTEGER NOT NULL
);

CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms INTEGER NOT NULL,
    endpoint TEXT NOT NULL,
    deployment TEXT NOT NULL,
    instance TEXT,
    kind TEXT NOT NULL,               -- deployment_state | instance_state | restart | ready
    from_state TEXT,
    to_state TEXT,
    reason TEXT
);
CREATE INDEX events_deployment ON events (endpoint, deployment, id);
