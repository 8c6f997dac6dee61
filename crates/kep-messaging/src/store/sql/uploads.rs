//! The statements of `uploads`: RCS and MMS files, usable until they expire. The same text
//! on both backends.

pub const INSERT: &str = "INSERT INTO uploads
     (file_id, client_id, kind, content_group_id, description, size, created_at, expires_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// Whether the client's RCS file (`$1` file, `$2` client, `$3` kind) lives past `$4`.
pub const RCS_FILE_USABLE: &str = "SELECT COUNT(*) FROM uploads
     WHERE file_id = $1 AND client_id = $2 AND kind = $3 AND expires_at > $4";

/// An MMS group's files, and how many of them live past `$1`.
pub const MMS_GROUP: &str = "SELECT COUNT(*), COUNT(*) FILTER (WHERE expires_at > $1) FROM uploads
     WHERE content_group_id = $2 AND client_id = $3 AND kind = $4";

pub const TAKE_EXPIRED: &str = "DELETE FROM uploads WHERE expires_at <= $1 RETURNING file_id";
