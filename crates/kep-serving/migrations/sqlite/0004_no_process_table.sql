-- Instance processes are found by the mark in their environment (KEP_INSTANCE_OWNER), which
-- also covers one spawned an instant before a kill, before any row could be written.
DROP TABLE processes;
