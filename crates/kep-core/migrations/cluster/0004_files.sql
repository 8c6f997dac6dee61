-- Files every node reads (uploads, DRM releases, model artifacts): each file of a bucket
-- (a service) as chunks of at most 1 MiB, numbered from 0; a file has at least chunk 0.
-- Chunks are stored uncompressed: files are mostly compressed already.
CREATE TABLE file_chunks (
    bucket TEXT NOT NULL,
    name   TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    data   BYTEA NOT NULL,
    PRIMARY KEY (bucket, name, seq)
);
ALTER TABLE file_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
