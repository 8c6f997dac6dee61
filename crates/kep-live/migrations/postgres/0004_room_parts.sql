-- Which nodes hold a part of which room (several nodes): a room's webhook hears
-- Room.OnRoomOpened when its first part opens, and Room.OnRoomClosed when its last closes,
-- among the nodes that are up (kep_cluster.nodes).
CREATE TABLE live_room_parts (
    service_id TEXT NOT NULL,
    room_id    TEXT NOT NULL,
    node_id    TEXT NOT NULL,
    PRIMARY KEY (service_id, room_id, node_id)
);
