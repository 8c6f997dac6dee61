//! Telling an org's agent of a new session, as an outbox of the platform's one shape
//! ([`kep_core::outbox`]): a session written `PENDING` is its item, each attempt is recorded
//! as the session's notification history, and a session stops being tried once the agent
//! answered 2xx, it is no longer `PENDING`, it expired, or its attempts are spent. What a
//! stop cut off is resumed at start. Sessions don't wait for each other.

use std::sync::Arc;
use std::time::Duration;

use kep_core::activity::ServiceActivity;
use kep_core::clock::Clock;
use kep_core::outbox::{Outbox, Policy};
use serde_json::json;

use super::rfc3339;
use crate::ids::SessionId;
use crate::store::{SessionRow, Store};
use kep_api::adapter::{AgentNotification, SessionStatus};

/// How the agent is told of a new session.
#[derive(Debug, Clone)]
pub struct NotifyPolicy {
    /// The path under the org's `adapter_agent`.
    pub path: String,
    pub outbox: Policy,
    /// How long one attempt may take.
    pub timeout: Duration,
}

pub struct Notifications {
    store: Arc<dyn Store>,
    clock: Clock,
    path: String,
    http: reqwest::Client,
    activity: ServiceActivity,
}

impl Notifications {
    pub fn new(
        store: Arc<dyn Store>,
        clock: Clock,
        policy: &NotifyPolicy,
        activity: ServiceActivity,
    ) -> anyhow::Result<Self> {
        Ok(Notifications {
            store,
            clock,
            activity,
            path: policy.path.clone(),
            http: kep_core::outbound::client(policy.timeout)?,
        })
    }
}

/// What the agent is told of a session.
pub fn notice(row: &SessionRow) -> AgentNotification {
    AgentNotification {
        session_id: row.session_id.to_string(),
        org_login_type_id: row.org_login_type_id.0,
        file_id: row.file_id.clone(),
        file_type: row.file_type,
        user: row.user.clone(),
        expires_at: rfc3339(row.expires_at),
    }
}

#[async_trait::async_trait]
impl Outbox for Notifications {
    type Key = SessionId;
    type Id = SessionId;
    /// The notice, and where it goes.
    type Item = (AgentNotification, String);

    async fn adopt(
        &self,
        node: Option<&str>,
        up: &[String],
    ) -> anyhow::Result<Vec<(SessionId, SessionId)>> {
        let now = self.clock.unix_s();
        let ids = self.store.adopt_unnotified_sessions(node, up, now).await?;
        Ok(ids.into_iter().map(|id| (id.clone(), id)).collect())
    }

    async fn load(&self, id: &SessionId) -> anyhow::Result<Option<(Self::Item, u32)>> {
        let Some(row) = self.store.session(id).await? else {
            return Ok(None);
        };
        if row.status != SessionStatus::Pending || row.expires_at <= self.clock.unix_s() {
            return Ok(None);
        }
        let made = self.store.notifications(id).await?;
        if made
            .iter()
            .any(|n| n.status.is_some_and(|s| (200..300).contains(&s)))
        {
            return Ok(None);
        }
        let Some(org) = self.store.org(row.org_login_type_id).await? else {
            return Ok(None);
        };
        let url = format!(
            "{}{}",
            crate::orgs::agent_base(&org.adapter_agent),
            self.path
        );
        let made = u32::try_from(made.len()).unwrap_or(u32::MAX);
        Ok(Some(((notice(&row), url), made)))
    }

    async fn attempt(
        &self,
        id: &SessionId,
        (notice, url): &Self::Item,
        attempt: u32,
    ) -> Result<(), String> {
        let sent = self
            .http
            .post(url)
            .header("Kep-AgentSession", format!("DSID {}", notice.session_id))
            .header(
                "Kep-OrgLoginType",
                format!("ID {}", notice.org_login_type_id),
            )
            .header("Kep-File-Id", &notice.file_id)
            .header("Kep-File-Type", notice.file_type.as_str())
            .json(notice)
            .send()
            .await;
        let (status, error) = match sent {
            Ok(res) => (Some(res.status().as_u16()), None),
            Err(e) => (None, Some(kep_core::outbound::error_text(e))),
        };
        if let Err(e) = self
            .store
            .record_notification(
                id,
                i64::from(attempt),
                self.clock.unix_ms(),
                status,
                error.as_deref(),
            )
            .await
        {
            tracing::warn!(error = %e, "recording a notification attempt");
        }
        match (status, error) {
            (Some(s), _) if (200..300).contains(&s) => {
                let detail = json!({ "attempt": attempt, "status": s });
                let ids: [&dyn std::fmt::Display; 2] = [&notice.org_login_type_id, id];
                self.activity
                    .record("drm_session.agent_notified", &ids, detail);
                Ok(())
            }
            (Some(s), _) => Err(format!("the agent answered {s}")),
            (None, error) => Err(error.unwrap_or_default()),
        }
    }

    /// The attempts are the record: nothing more to write.
    async fn give_up(&self, id: &SessionId, attempts: u32, error: &str) {
        let org = self.store.session(id).await.ok().flatten();
        let org = org.map_or(0, |row| row.org_login_type_id.0);
        let detail = json!({ "attempts": attempts, "error": error });
        self.activity
            .record("drm_session.agent_not_notified", &[&org, id], detail);
    }
}
