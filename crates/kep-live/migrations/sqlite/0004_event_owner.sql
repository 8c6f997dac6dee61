-- The node that sends an event (CONTRACT §5): the one that wrote it down, or the one that
-- adopted it from a node that stopped. Unset on a node of its own.
ALTER TABLE live_webhook_events ADD COLUMN node_id TEXT;
