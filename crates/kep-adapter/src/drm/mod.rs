//! DRM release sessions: the request that notifies the agent, the agent's result, the
//! released file streamed to storage, and expiry.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt as _};
use kep_core::secret::random_token;
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt as _;

use kep_core::activity::ServiceActivity;
use kep_core::clock::Clock;
use kep_core::cluster::SharedFiles;
use kep_core::outbox::Dispatcher;
use kep_core::service::{Context, Service};
use serde_json::json;

mod notify;

use notify::Notifications;
pub use notify::NotifyPolicy;

use crate::AdapterError;
use crate::ids::{OrgLoginTypeId, SessionId};
use crate::store::{AgentResult, NotificationRow, SessionFilter, SessionRow, Store};
use kep_api::adapter::{
    AgentNotification, DrmRequest, DrmSession, FileType, NotificationAttempt, ReleasedFile,
    SessionStatus, UploadResult,
};

pub(crate) fn rfc3339(unix: i64) -> String {
    jiff::Timestamp::from_second(unix)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

pub struct Drm {
    store: Arc<dyn Store>,
    clock: Clock,
    files: PathBuf,
    /// The released files for every node (with several nodes; CONTRACT §5).
    shared: SharedFiles,
    session_ttl_s: i64,
    max_file_bytes: u64,
    notifications: Dispatcher<Notifications>,
    activity: ServiceActivity,
    /// This node, which notifies the agent of the sessions it makes.
    node: Option<String>,
}

/// A session as the agent's calls see it, after the org check.
pub struct AgentView {
    pub row: SessionRow,
    /// The stored status, or `EXPIRED` past the expiry.
    pub status: SessionStatus,
}

impl Drm {
    /// Resumes the notifications a previous run left undelivered.
    pub async fn start(
        store: Arc<dyn Store>,
        ctx: &Context,
        files: PathBuf,
        session_ttl_s: u64,
        max_file_bytes: u64,
        notify: &NotifyPolicy,
    ) -> anyhow::Result<Self> {
        kep_core::private::dir(&files)?;
        let activity = ctx.activity.of::<crate::AdapterService>();
        let notifications = Dispatcher::new(
            Notifications::new(
                Arc::clone(&store),
                ctx.clock.clone(),
                notify,
                activity.clone(),
            )?,
            notify.outbox,
            ctx,
        );
        let resumed = notifications.resume().await?;
        if resumed > 0 {
            tracing::info!(sessions = resumed, "resumed agent notifications");
        }
        Ok(Drm {
            store,
            clock: ctx.clock.clone(),
            files,
            shared: ctx.cluster.files(<crate::AdapterService as Service>::NAME),
            session_ttl_s: i64::try_from(session_ttl_s).unwrap_or(i64::MAX),
            max_file_bytes,
            notifications,
            activity,
            node: ctx.cluster.node_id().map(str::to_owned),
        })
    }

    /// Sets `kep_adapter_drm_sessions{status}`: every status, 0 where none is.
    pub async fn observe(&self) {
        let counts = match self.store.sessions_by_status().await {
            Ok(counts) => counts,
            Err(e) => return tracing::warn!(error = %e, "counting DRM sessions"),
        };
        for status in ["PENDING", "GRANTED", "DENIED", "RELEASED", "EXPIRED"] {
            let n = counts.iter().find(|c| c.0 == status).map_or(0, |c| c.1);
            metrics::gauge!(crate::metrics::DRM_SESSIONS, "status" => status).set(n as f64);
        }
    }

    /// Records a change of the session.
    fn record(&self, event: &str, row: &SessionRow, detail: serde_json::Value) {
        let ids: [&dyn std::fmt::Display; 2] = [&row.org_login_type_id.0, &row.session_id];
        self.activity.record(event, &ids, detail);
    }

    fn file_path(&self, session_id: &SessionId) -> PathBuf {
        self.files.join(session_id.as_str())
    }

    fn now(&self) -> i64 {
        self.clock.unix_s()
    }

    /// Creates a `PENDING` session and starts notifying the org's agent.
    pub async fn request(&self, req: DrmRequest) -> Result<AgentNotification, AdapterError> {
        let now = self.now();
        let row = SessionRow {
            session_id: SessionId::from(random_token(16)),
            org_login_type_id: OrgLoginTypeId(req.org_login_type_id),
            file_id: req.file_id,
            file_type: req.file_type,
            user: req.user,
            status: SessionStatus::Pending,
            result: None,
            reason: None,
            extra: None,
            file_size: None,
            file_sha256: None,
            created_at: now,
            expires_at: now.saturating_add(self.session_ttl_s),
        };
        self.store
            .insert_session(&row, self.node.as_deref())
            .await?;
        self.record(
            "drm_session.requested",
            &row,
            json!({ "fileId": row.file_id, "fileType": row.file_type.as_str() }),
        );
        let notice = notify::notice(&row);
        self.notifications
            .queue(row.session_id.clone(), row.session_id)
            .await;
        Ok(notice)
    }

    /// The operator's view of a session, with its notification history.
    pub async fn show(&self, session_id: &SessionId) -> Result<Option<DrmSession>, AdapterError> {
        let Some(row) = self.store.session(session_id).await? else {
            return Ok(None);
        };
        let notifications = self.store.notifications(session_id).await?;
        Ok(Some(self.view(row, notifications)))
    }

    /// The sessions `filter` picks, each as [`Drm::show`] shows it: two reads in all.
    pub async fn list(&self, filter: &SessionFilter<'_>) -> Result<Vec<DrmSession>, AdapterError> {
        let rows = self.store.sessions(filter, self.now()).await?;
        let ids: Vec<SessionId> = rows.iter().map(|r| r.session_id.clone()).collect();
        let mut notifications: HashMap<SessionId, Vec<NotificationRow>> = HashMap::new();
        for n in self.store.notifications_of(&ids).await? {
            notifications
                .entry(n.session_id)
                .or_default()
                .push(n.notification);
        }
        Ok(rows
            .into_iter()
            .map(|row| {
                let attempts = notifications.remove(&row.session_id).unwrap_or_default();
                self.view(row, attempts)
            })
            .collect())
    }

    /// A session and its notification attempts as the operator sees them.
    fn view(&self, row: SessionRow, notifications: Vec<NotificationRow>) -> DrmSession {
        let notifications = notifications
            .into_iter()
            .map(|n| NotificationAttempt {
                attempt: n.attempt,
                at: jiff::Timestamp::from_millisecond(n.at)
                    .map(|t| t.to_string())
                    .unwrap_or_default(),
                status: n.status.and_then(|s| u16::try_from(s).ok()),
                error: n.error,
            })
            .collect();
        let status = self.effective_status(&row);
        DrmSession {
            file: match (row.file_size, &row.file_sha256) {
                (Some(size), Some(sha256)) => Some(ReleasedFile {
                    size: size.unsigned_abs(),
                    sha256: sha256.clone(),
                }),
                _ => None,
            },
            extra: row.extra.map(|e| e.0),
            file_type: row.file_type,
            session_id: row.session_id.into_string(),
            org_login_type_id: row.org_login_type_id.0,
            file_id: row.file_id,
            user: row.user,
            status,
            result: row.result,
            reason: row.reason,
            created_at: rfc3339(row.created_at),
            expires_at: rfc3339(row.expires_at),
            notifications,
        }
    }

    /// The session an agent call names, if it belongs to `org_id` and is for `file_id`.
    pub async fn for_agent(
        &self,
        org_id: OrgLoginTypeId,
        session_id: &SessionId,
        file_id: &str,
    ) -> Result<AgentView, AdapterError> {
        let row = self
            .store
            .session(session_id)
            .await?
            .filter(|r| r.org_login_type_id == org_id)
            .ok_or_else(|| AdapterError::NotFound("no such session".into()))?;
        if row.file_id != file_id {
            return Err(AdapterError::NotFound(
                "no such file in this session".into(),
            ));
        }
        let status = self.effective_status(&row);
        Ok(AgentView { row, status })
    }

    /// `uploadResult`: `SUCCESS` grants a `DRM` file, `FAILURE` denies; once per session.
    pub async fn record_result(
        &self,
        view: &AgentView,
        claimed_type: FileType,
        body: UploadResult,
    ) -> Result<(), AdapterError> {
        if claimed_type != view.row.file_type {
            return Err(AdapterError::BadRequest(format!(
                "Kep-File-Type {} does not match the session's file ({})",
                claimed_type.as_str(),
                view.row.file_type.as_str()
            )));
        }
        let granted = match (view.row.file_type, body.result.as_str()) {
            (FileType::Drm, "SUCCESS") => true,
            (_, "FAILURE") => false,
            (FileType::Plain, "SUCCESS") => {
                return Err(AdapterError::BadRequest(
                    "a PLAIN file takes FAILURE only: it needs no release".into(),
                ));
            }
            _ => {
                return Err(AdapterError::BadRequest(
                    "result must be SUCCESS or FAILURE".into(),
                ));
            }
        };
        if body.reason.trim().is_empty() {
            return Err(AdapterError::BadRequest("reason is required".into()));
        }
        if body.extra.as_ref().is_some_and(|e| !e.is_object()) {
            return Err(AdapterError::BadRequest("extra must be an object".into()));
        }
        if view.status != SessionStatus::Pending {
            return Err(out_of_order(view.status));
        }
        let status = if granted {
            SessionStatus::Granted
        } else {
            SessionStatus::Denied
        };
        let result = AgentResult {
            status,
            result: &body.result,
            reason: &body.reason,
            extra: body.extra.as_ref(),
        };
        let done = self
            .store
            .record_result(&view.row.session_id, &result, self.now())
            .await?;
        if !done {
            // Another call or the expiry got there first.
            return Err(AdapterError::Conflict(
                "the session already has a result or expired".into(),
            ));
        }
        let event = if granted {
            "drm_session.granted"
        } else {
            "drm_session.denied"
        };
        self.record(event, &view.row, json!({ "reason": body.reason }));
        Ok(())
    }

    /// Whether `uploadDecrypted` may come now.
    pub fn check_release(&self, view: &AgentView) -> Result<(), AdapterError> {
        if view.row.file_type == FileType::Plain {
            return Err(AdapterError::Conflict(
                "a PLAIN file needs no release".into(),
            ));
        }
        match view.status {
            SessionStatus::Granted => Ok(()),
            SessionStatus::Pending => Err(AdapterError::Conflict(
                "no SUCCESS result for this session yet".into(),
            )),
            other => Err(out_of_order(other)),
        }
    }

    /// Streams the released file to storage (never whole in memory), with its size limit
    /// and SHA-256, then marks the session `RELEASED`.
    pub async fn release<S, B, E>(
        &self,
        session_id: &SessionId,
        mut chunks: S,
    ) -> Result<ReleasedFile, AdapterError>
    where
        S: Stream<Item = Result<B, E>> + Unpin,
        B: AsRef<[u8]>,
        E: std::fmt::Display,
    {
        let final_path = self.file_path(session_id);
        let part_path = final_path.with_extension("part");
        let written = async {
            // Large writes: every tokio::fs call is a hop to the blocking pool.
            let mut file = tokio::io::BufWriter::with_capacity(
                1024 * 1024,
                kep_core::private::create_async(&part_path)
                    .await
                    .map_err(internal)?,
            );
            let mut hasher = Sha256::new();
            let mut size: u64 = 0;
            while let Some(chunk) = chunks.next().await {
                let chunk = chunk
                    .map_err(|e| AdapterError::BadRequest(format!("reading the file part: {e}")))?;
                let chunk = chunk.as_ref();
                size += chunk.len() as u64;
                if size > self.max_file_bytes {
                    return Err(AdapterError::PayloadTooLarge(self.max_file_bytes));
                }
                hasher.update(chunk);
                file.write_all(chunk).await.map_err(internal)?;
            }
            if size == 0 {
                return Err(AdapterError::BadRequest("the file is empty".into()));
            }
            file.flush().await.map_err(internal)?;
            // Durable before the agent hears 200.
            file.get_ref().sync_all().await.map_err(internal)?;
            Ok(ReleasedFile {
                size,
                sha256: hex::encode(hasher.finalize()),
            })
        }
        .await;
        let released = match written {
            Ok(r) => r,
            Err(e) => {
                let _ = tokio::fs::remove_file(&part_path).await;
                return Err(e);
            }
        };
        tokio::fs::rename(&part_path, &final_path)
            .await
            .map_err(internal)?;
        // Every node's before the session says RELEASED.
        if let Err(e) = self.shared.publish(session_id.as_str(), &final_path).await {
            let _ = tokio::fs::remove_file(&final_path).await;
            return Err(internal(e));
        }
        let size = i64::try_from(released.size).unwrap_or(i64::MAX);
        if !self
            .store
            .record_release(session_id, size, &released.sha256, self.now())
            .await?
        {
            let _ = tokio::fs::remove_file(&final_path).await;
            let _ = self.shared.remove(session_id.as_str()).await;
            return Err(AdapterError::Conflict(
                "the session was released or expired meanwhile".into(),
            ));
        }
        metrics::counter!(crate::metrics::RELEASED_BYTES).increment(released.size);
        if let Ok(Some(row)) = self.store.session(session_id).await {
            let detail = json!({ "size": released.size, "sha256": released.sha256 });
            self.record("drm_session.released", &row, detail);
        }
        Ok(released)
    }

    /// The released file of a session, if there is one.
    pub async fn released_file(
        &self,
        session_id: &SessionId,
    ) -> Result<Option<(PathBuf, ReleasedFile)>, AdapterError> {
        let Some(row) = self.store.session(session_id).await? else {
            return Ok(None);
        };
        let (SessionStatus::Released, Some(size), Some(sha256)) =
            (row.status, row.file_size, row.file_sha256)
        else {
            return Ok(None);
        };
        // Released through another node: copied here first.
        let path = self.file_path(session_id);
        if !self
            .shared
            .fetch(session_id.as_str(), &path)
            .await
            .map_err(internal)?
        {
            return Err(internal(std::io::Error::other(format!(
                "the released file of {session_id} is lost"
            ))));
        }
        let file = ReleasedFile {
            size: size.unsigned_abs(),
            sha256,
        };
        Ok(Some((path, file)))
    }

    /// Removes what a process killed mid-upload left: half-written `.part` files, and files
    /// renamed into place whose release was never recorded. Run at startup, before any upload.
    pub async fn remove_unreleased_files(&self) -> anyhow::Result<usize> {
        let mut removed = 0;
        let mut entries = tokio::fs::read_dir(&self.files).await?;
        while let Some(entry) = entries.next_entry().await? {
            let name = entry.file_name().to_string_lossy().into_owned();
            let released = match self.store.session(&SessionId::from(name)).await? {
                Some(row) => row.status == SessionStatus::Released,
                None => false,
            };
            if !released {
                tokio::fs::remove_file(entry.path()).await?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Removes the files of deleted sessions.
    pub async fn forget_files(&self, session_ids: &[SessionId]) {
        for id in session_ids {
            let _ = tokio::fs::remove_file(self.file_path(id)).await;
            let _ = self.shared.remove(id.as_str()).await;
        }
    }

    /// The stored status, with an open session past its expiry shown as `EXPIRED` even
    /// before the sweeper marks it.
    fn effective_status(&self, row: &SessionRow) -> SessionStatus {
        match row.status {
            SessionStatus::Pending | SessionStatus::Granted if row.expires_at <= self.now() => {
                SessionStatus::Expired
            }
            s => s,
        }
    }

    /// Marks expired sessions, every `every`, until the process ends.
    pub async fn sweep(self: Arc<Self>, every: Duration) {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            match self.store.expire(self.now()).await {
                Ok(expired) => {
                    for (session_id, org) in expired {
                        self.activity.record(
                            "drm_session.expired",
                            &[&org.0, &session_id],
                            serde_json::Value::Null,
                        );
                    }
                }
                Err(e) => tracing::warn!(error = %e, "expiring DRM sessions"),
            }
        }
    }
}

fn out_of_order(status: SessionStatus) -> AdapterError {
    AdapterError::Conflict(match status {
        SessionStatus::Expired => "the session expired".to_owned(),
        SessionStatus::Released => "the file was already released".to_owned(),
        s => format!("the session already has a result ({})", s.as_str()),
    })
}

fn internal(e: std::io::Error) -> AdapterError {
    AdapterError::Internal(e.into())
}
