-- The node that sends an alert (CONTRACT §5): the one that raised it, or the one that
-- adopted it from a node that stopped. Unset on a node of its own.
ALTER TABLE alerts ADD COLUMN node_id TEXT;
