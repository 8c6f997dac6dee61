-- The delivery queue in a table of its own (PostgreSQL only): a message's final state then
-- changes no indexed column (`status` was in two partial indexes' predicates), so
-- PostgreSQL updates it in place (a HOT update) instead of adding an entry to each of the
-- message's indexes; the room fillfactor leaves on each page is what in place needs.
-- `messages.next_attempt_at` is no longer read here.
CREATE TABLE due (
    uid             TEXT COLLATE "C" PRIMARY KEY,
    next_attempt_at BIGINT NOT NULL
);
CREATE INDEX due_by_time ON due(next_attempt_at);
INSERT INTO due (uid, next_attempt_at) SELECT uid, next_attempt_at FROM messages WHERE status = '100';
DROP INDEX messages_due;
DROP INDEX messages_unreported;
CREATE INDEX messages_unreported ON messages(client_id, uid) WHERE channel = 'RCS' AND reported = 0;
ALTER TABLE messages SET (fillfactor = 85);
