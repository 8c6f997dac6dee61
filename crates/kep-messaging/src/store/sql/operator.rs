//! The fixed statements of the operator's views (the list and the result groups are built
//! per filter in `sql.rs`). The same text on both backends.

/// A message's hand-overs, oldest first.
pub const HANDOVERS: &str =
    "SELECT route, outcome, at, carrier FROM outbox WHERE uid = $1 ORDER BY id";

/// What left for the carriers, newest first; PostgreSQL keeps no copy of the payload: it is
/// the message's request.
pub const OUTBOX: &str = "SELECT o.id, o.uid, o.route, o.phone_number,
       COALESCE(o.payload, m.request, '') AS payload, o.outcome, o.at
     FROM outbox o LEFT JOIN messages m ON m.uid = o.uid ORDER BY o.id DESC LIMIT $1";

/// The stored messages by channel and status (the totals' counters start from them).
pub const COUNTS: &str =
    "SELECT channel, status, COUNT(*) AS messages FROM messages GROUP BY channel, status";
