-- The serving store on PostgreSQL (schema kep_serving): the tables of migrations/sqlite/,
-- in PostgreSQL's types. Names list in byte order (COLLATE "C"), as in SQLite.

-- Images and models are soft-deleted: a deployment keeps what it was created from, but
-- cannot be edited once its source is gone.
CREATE TABLE images (
    id         TEXT PRIMARY KEY,
    name       TEXT COLLATE "C" NOT NULL,
    command    JSONB NOT NULL,            -- argv words
    created_at BIGINT NOT NULL,
    deleted    INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX images_name ON images (name) WHERE deleted = 0;

CREATE TABLE models (
    id         TEXT PRIMARY KEY,
    name       TEXT COLLATE "C" NOT NULL,
    framework  TEXT NOT NULL,
    path       TEXT NOT NULL,
    size       BIGINT NOT NULL,
    sha256     TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    deleted    INTEGER NOT NULL DEFAULT 0,
    -- Inputs and outputs as read from the artifact: [{name, datatype, shape}].
    inputs     JSONB NOT NULL DEFAULT '[]',
    outputs    JSONB NOT NULL DEFAULT '[]'
);
CREATE UNIQUE INDEX models_name ON models (name) WHERE deleted = 0;

CREATE TABLE endpoints (
    name           TEXT COLLATE "C" PRIMARY KEY,
    description    TEXT,
    instance_type  TEXT NOT NULL,
    instance_count BIGINT NOT NULL,
    protocol       TEXT NOT NULL,
    key_hash       TEXT NOT NULL,
    mirroring      BOOLEAN NOT NULL DEFAULT FALSE,
    responder      TEXT,
    created_at     BIGINT NOT NULL
);

CREATE TABLE deployments (
    endpoint   TEXT COLLATE "C" NOT NULL REFERENCES endpoints (name) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    position   BIGINT NOT NULL,           -- creation order, for `--ratio`
    spec       JSONB NOT NULL,            -- the resolved deployment spec
    weight     BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (endpoint, name)
);

CREATE TABLE events (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at_ms      BIGINT NOT NULL,
    endpoint   TEXT NOT NULL,
    deployment TEXT NOT NULL,
    instance   TEXT,
    kind       TEXT NOT NULL,             -- deployment_state | instance_state | restart | ready
    from_state TEXT,
    to_state   TEXT,
    reason     TEXT
);
CREATE INDEX events_deployment ON events (endpoint, deployment, id);

-- Alerts to an endpoint's incoming webhook (seed 001 "Events", CONTRACT §3).
CREATE TABLE alert_settings (
    endpoint TEXT PRIMARY KEY REFERENCES endpoints (name) ON DELETE CASCADE,
    settings JSONB NOT NULL               -- the settings as PUT
);

-- Every alert raised, with the webhook it goes to: a pending one is queued again when
-- kep starts, so a restart loses none.
CREATE TABLE alerts (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint    TEXT NOT NULL REFERENCES endpoints (name) ON DELETE CASCADE,
    deployment  TEXT,
    condition   TEXT NOT NULL,
    text        TEXT NOT NULL,
    webhook_url TEXT NOT NULL,
    status      TEXT NOT NULL,            -- pending | sent | failed
    attempts    BIGINT NOT NULL DEFAULT 0,
    error       TEXT,
    at_ms       BIGINT NOT NULL,
    sent_at_ms  BIGINT
);
CREATE INDEX alerts_endpoint ON alerts (endpoint, id);
CREATE INDEX alerts_pending ON alerts (id) WHERE status = 'pending';
