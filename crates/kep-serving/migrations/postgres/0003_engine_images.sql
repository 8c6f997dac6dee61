-- Images in the container engine (CONTRACT §3 "Container images"): a reference, the
-- engine's id and size pinned at registration, and whether kep loaded it from an archive.
-- Such an image has no command.
ALTER TABLE images ALTER COLUMN command DROP NOT NULL;
ALTER TABLE images ADD COLUMN reference TEXT;
ALTER TABLE images ADD COLUMN engine_id TEXT;
ALTER TABLE images ADD COLUMN size BIGINT;
ALTER TABLE images ADD COLUMN source TEXT;
