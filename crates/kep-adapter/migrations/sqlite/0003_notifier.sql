-- The node that notifies a session's agent (CONTRACT §5): the one that made the session, or
-- the one that adopted it from a node that stopped. Unset on a node of its own.
ALTER TABLE drm_sessions ADD COLUMN node_id TEXT;
