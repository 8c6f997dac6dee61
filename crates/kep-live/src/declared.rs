//! `[[live.services]]` of a declaration: each service created with its secrets, or given
//! the declared ones when their hashes differ, and its webhook set when declared and
//! different. Live services are never deleted, `--prune` or not: the operator API has no
//! call that deletes one.

use std::sync::Arc;

use kep_api::declared::{Applied, Outcome};
use kep_core::declared::{ApplyError, Declares, Planned, Steps, read_section, secret};
use serde::Deserialize;
use serde_json::Value;

use crate::Live;
use crate::access::CreateOutcome;
use crate::api::operator::{check_webhook_url, valid_service_id};
use crate::ids::ServiceId;

const KIND: &str = "live.services";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    #[serde(default)]
    services: Option<Vec<DeclaredService>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DeclaredService {
    service_id: String,
    admin_secret: String,
    service_secret: String,
    #[serde(default)]
    webhook: Option<DeclaredWebhook>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeclaredWebhook {
    url: String,
    #[serde(default)]
    secret: Option<String>,
    #[serde(default = "enabled")]
    enabled: bool,
}

fn enabled() -> bool {
    true
}

/// What applying does to one service: made, given its secrets, its webhook set.
struct Step {
    id: ServiceId,
    create: bool,
    secrets: Option<(String, String)>,
    webhook: Option<DeclaredWebhook>,
}

pub(crate) struct Declared(pub(crate) Arc<Live>);

#[async_trait::async_trait]
impl Declares for Declared {
    fn section(&self) -> &'static str {
        "live"
    }

    async fn plan(&self, section: Value, _prune: bool) -> Result<Box<dyn Planned>, ApplyError> {
        let Section { services } = read_section("live", section)?;
        let mut steps = Steps::new(KIND);
        for s in services.unwrap_or_default() {
            let id = s.service_id;
            steps.once(&id)?;
            if !valid_service_id(&id) {
                return Err(ApplyError::refused(format!(
                    "{KIND} {id}: serviceId: 1 to 64 letters, digits, '.', '_' or '-'"
                )));
            }
            let secrets = (
                secret(KIND, &id, "adminSecret", s.admin_secret)?,
                secret(KIND, &id, "serviceSecret", s.service_secret)?,
            );
            if let Some(w) = &s.webhook {
                check_webhook_url(&w.url)
                    .map_err(|e| ApplyError::refused(format!("{KIND} {id}: webhook.url: {e}")))?;
                if let Some(given) = &w.secret {
                    secret(KIND, &id, "webhook.secret", given.clone())?;
                }
            }
            let service_id = ServiceId::from(id.clone());
            let same = self
                .0
                .access
                .has_secrets(&service_id, (&secrets.0, &secrets.1))
                .await?;
            let webhook = s.webhook.filter(|w| self.webhook_differs(&service_id, w));
            let (outcome, step) = match same {
                None => (Outcome::Created, Some((true, Some(secrets)))),
                Some(true) if webhook.is_none() => (Outcome::Unchanged, None),
                Some(same) => (Outcome::Changed, Some((false, (!same).then_some(secrets)))),
            };
            let step = step.map(|(create, secrets)| Step {
                id: service_id,
                create,
                secrets,
                webhook,
            });
            steps.push(id, outcome, step);
        }
        Ok(Box::new(Plan(steps, Arc::clone(&self.0))))
    }
}

impl Declared {
    /// Whether the service's webhook is other than `w` (a declared secret counts; one left
    /// out keeps the stored one).
    fn webhook_differs(&self, id: &ServiceId, w: &DeclaredWebhook) -> bool {
        match self.0.webhooks.get(id.as_str()) {
            None => true,
            Some(row) => {
                row.url != w.url
                    || row.enabled != w.enabled
                    || w.secret.as_ref().is_some_and(|s| *s != row.secret)
            }
        }
    }
}

struct Plan(Steps<Step>, Arc<Live>);

#[async_trait::async_trait]
impl Planned for Plan {
    fn outcomes(&self) -> Vec<Applied> {
        self.0.outcomes()
    }

    async fn apply(self: Box<Self>) -> Result<(), ApplyError> {
        let Plan(steps, live) = *self;
        for step in steps.take() {
            let id = step.id;
            if let Some(secrets) = step.secrets {
                if step.create {
                    if let CreateOutcome::Taken =
                        live.access.create(id.clone(), None, secrets).await?
                    {
                        return Err(ApplyError::refused(format!(
                            "{KIND} {id}: created meanwhile"
                        )));
                    }
                    live.activity
                        .record("service.created", &[&id.as_str()], Value::Null);
                } else {
                    live.access.set_secrets(&id, secrets).await?;
                    live.activity
                        .record("service.secrets_rotated", &[&id.as_str()], Value::Null);
                }
            }
            if let Some(w) = step.webhook {
                let row = live.webhooks.put(&id, w.url, w.enabled, w.secret).await?;
                let detail = serde_json::json!({ "url": row.url, "enabled": row.enabled });
                live.activity.record("webhook.set", &[&id.as_str()], detail);
            }
        }
        Ok(())
    }
}
