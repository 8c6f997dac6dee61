-- A hand-over's payload is its message's request, which never changes: PostgreSQL no longer
-- writes a copy of it with every hand-over (a fifth of the WAL a message made under load,
-- BENCHMARKS.md); the read-back takes it from the message.
ALTER TABLE outbox ALTER COLUMN payload DROP NOT NULL;
