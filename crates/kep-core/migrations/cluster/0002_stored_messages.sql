-- Messages larger than NOTIFY carries (8,000 bytes): the notification names the row, and
-- rows older than a minute go.
CREATE TABLE stored_messages (
    id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payload TEXT NOT NULL,
    at      BIGINT NOT NULL
);
