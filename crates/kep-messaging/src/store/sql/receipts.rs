//! The statements of `carrier_receipts` (migrations 0005 and 0006): the parts of
//! acknowledged hand-overs and their receipts, by account and the carrier's id. The same
//! text on both backends.

/// PostgreSQL: serialises two receipts of one hand-over on its message, so that exactly one
/// sees every part decided (a row lock on the parts would deadlock two parts locked in
/// turn). SQLite has one writer, taken by [`RECORD`], which comes first there.
pub const LOCK_MESSAGE: &str = "SELECT pg_advisory_xact_lock(hashtext(uid)) FROM carrier_receipts
     WHERE account = $1 AND carrier_message_id = $2";

/// The first receipt of a part decides it: a repeated one changes nothing.
pub const RECORD: &str = "UPDATE carrier_receipts SET state = $1, received_at = $2
     WHERE account = $3 AND carrier_message_id = $4 AND state IS NULL
     RETURNING uid, route, attempt";

pub const KNOWN: &str =
    "SELECT 1 FROM carrier_receipts WHERE account = $1 AND carrier_message_id = $2";

/// The parts of one hand-over (`$1` uid, `$2` route, `$3` attempt).
pub const HAND_OVER: &str = "SELECT uid, route, attempt, carrier, submitted_at, state
     FROM carrier_receipts WHERE uid = $1 AND route = $2 AND attempt = $3";

/// Every part a message was handed over in, in the order they went.
pub const OF_MESSAGE: &str = "SELECT uid, route, attempt, carrier, submitted_at, state
     FROM carrier_receipts WHERE uid = $1 ORDER BY submitted_at, carrier_message_id";

/// The rows an SMPP carrier (`$2`) had before migration 0006, under its account (`$1`).
pub const ADOPT: &str =
    "UPDATE carrier_receipts SET account = $1 WHERE account = $2 AND carrier = $2";

pub const SWEEP: &str = "DELETE FROM carrier_receipts WHERE submitted_at < $1";
