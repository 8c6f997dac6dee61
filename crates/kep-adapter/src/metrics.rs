//! The adapter's series on `/metrics`: DRM sessions by status (read at each scrape) and the
//! bytes of released files, each there from the start.

pub(crate) const DRM_SESSIONS: &str = "kep_adapter_drm_sessions";
pub(crate) const RELEASED_BYTES: &str = "kep_adapter_released_bytes_total";

/// Describes the series and makes the counter, at 0: a dashboard or an alert on it sees 0,
/// not "no data", before the first release.
pub(crate) fn register() {
    metrics::describe_gauge!(DRM_SESSIONS, "DRM sessions by stored status");
    metrics::describe_counter!(
        RELEASED_BYTES,
        "Bytes of the released files stored: those the store recorded at start, and those released since"
    );
    metrics::counter!(RELEASED_BYTES).increment(0);
}

/// Starts the released bytes from what the store records, once at start: after a restart
/// the counter goes on from the stored total instead of 0. The sessions of a deleted org
/// login type are no longer counted after a restart.
pub(crate) fn seed(released_bytes: i64) {
    metrics::counter!(RELEASED_BYTES).absolute(u64::try_from(released_bytes).unwrap_or(0));
}
