-- A foreign key check locks the row it refers to (FOR KEY SHARE): one per accepted message
-- on its client's row, and one per hand-over on its message's, which cost about a tenth
-- of PostgreSQL's time under load (BENCHMARKS.md). Deleting a client deletes its messages
-- and their hand-overs itself (`delete_client`).
ALTER TABLE messages DROP CONSTRAINT messages_client_id_fkey;
ALTER TABLE outbox DROP CONSTRAINT outbox_uid_fkey;
