-- The operator's views (/admin/v1/messaging/messages, /report-groups): newest first,
-- across clients or by number or group, read from an index in uid (or creation) order
-- rather than by sorting the table. Across clients, uid order is the primary key's; a
-- client's is messages_client_uid's, one channel after the other, merged.
CREATE INDEX messages_by_phone ON messages(phone_number, uid);
CREATE INDEX messages_by_report_group ON messages(report_group_id) WHERE report_group_id IS NOT NULL;
CREATE INDEX report_groups_by_created ON report_groups(created_at);
CREATE INDEX report_groups_by_client ON report_groups(client_id, created_at);

-- A message's hand-overs (its timeline), and what deleting its client cascades through.
CREATE INDEX outbox_by_uid ON outbox(uid);

-- The carrier connector each hand-over went to (`Carrier::name`). Until now the built-in
-- simulator was the only one, so that is what the rows already here were handed to.
ALTER TABLE outbox ADD COLUMN carrier TEXT NOT NULL DEFAULT 'simulator';
