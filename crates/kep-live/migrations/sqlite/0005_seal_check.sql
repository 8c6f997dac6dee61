-- The seal key's check value (kep_core::seal): admin_ha, service_hs and webhook secrets are
-- sealed under a key kept outside the database, and a start with another key is refused.
CREATE TABLE live_seal (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    key_check TEXT NOT NULL
) STRICT;
