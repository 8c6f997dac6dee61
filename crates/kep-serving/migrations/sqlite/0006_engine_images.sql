-- Images in the container engine (CONTRACT §3 "Container images"): a reference, the
-- engine's id and size pinned at registration, and whether kep loaded it from an archive.
-- Such an image has no command; SQLite drops NOT NULL only by copying the table.
CREATE TABLE images_new (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    command    TEXT,                  -- JSON array of argv words; NULL for an engine image
    reference  TEXT,
    engine_id  TEXT,
    size       INTEGER,
    source     TEXT,                  -- reference | archive
    created_at INTEGER NOT NULL,
    deleted    INTEGER NOT NULL DEFAULT 0
);
INSERT INTO images_new (id, name, command, created_at, deleted)
    SELECT id, name, command, created_at, deleted FROM images;
DROP TABLE images;
ALTER TABLE images_new RENAME TO images;
CREATE UNIQUE INDEX images_name ON images (name) WHERE deleted = 0;
