-- A model's inputs and outputs as read from the artifact: JSON arrays of
-- {name, datatype, shape} (KServe v2 datatype names, -1 for a variable dimension).
ALTER TABLE models ADD COLUMN inputs TEXT NOT NULL DEFAULT '[]';
ALTER TABLE models ADD COLUMN outputs TEXT NOT NULL DEFAULT '[]';
