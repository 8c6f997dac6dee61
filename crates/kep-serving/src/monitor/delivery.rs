//! Alert delivery, an outbox of the platform's one shape ([`kep_core::outbox`]): each
//! alert is written down first, then posted as `{"text": …}` to the webhook, retried with
//! back-off until its attempts are spent. An endpoint's alerts go out in order, and a slow
//! webhook never holds up another endpoint's.

use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use kep_core::activity::ServiceActivity;
use kep_core::clock::Clock;
use kep_core::outbox::{Dispatcher, Outbox, Policy};
use kep_core::service::Context;
use serde_json::json;

use crate::ids::{AlertId, EndpointName};
use crate::kinds::AlertStatus;
use crate::store::{AlertRow, NewAlert, Store};

#[derive(Debug, Clone, Copy)]
pub struct DeliveryPolicy {
    /// Attempts, back-off, and the alerts waiting per endpoint (one more is recorded as
    /// failed).
    pub outbox: Policy,
    /// How long one attempt may take.
    pub timeout: Duration,
}

pub struct Delivery {
    dispatcher: Dispatcher<Alerts>,
}

impl Delivery {
    /// Queues the alerts a previous run had not delivered.
    pub async fn start(
        store: Arc<dyn Store>,
        policy: DeliveryPolicy,
        ctx: &Context,
    ) -> anyhow::Result<Delivery> {
        let http = kep_core::outbound::client(policy.timeout)?;
        let alerts = Alerts {
            store,
            http,
            timeout: policy.timeout,
            clock: ctx.clock.clone(),
            activity: ctx.activity.of::<crate::ServingService>(),
            node: ctx.cluster.node_id().map(str::to_owned),
        };
        let dispatcher = Dispatcher::new(alerts, policy.outbox, ctx);
        dispatcher.resume().await?;
        Ok(Delivery { dispatcher })
    }

    /// Records the alert as pending, then queues it.
    pub async fn send(&self, alert: &NewAlert, webhook_url: &str) {
        let alerts = self.dispatcher.outbox();
        let at = alerts.clock.unix_ms();
        let node = alerts.node.as_deref();
        match alerts
            .store
            .insert_alert(alert, webhook_url, at, node)
            .await
        {
            Ok(id) => self.dispatcher.queue(alert.endpoint.clone(), id).await,
            Err(e) => tracing::error!(endpoint = %alert.endpoint, error = %e, "recording an alert"),
        }
    }
}

/// An alert's ids in the activity: its endpoint's, and its deployment's if it has one.
fn ids(row: &AlertRow) -> Vec<&dyn Display> {
    let mut ids: Vec<&dyn Display> = vec![&row.endpoint];
    ids.extend(row.deployment.as_ref().map(|d| d as &dyn Display));
    ids
}

/// The alerts as the outbox sees them.
struct Alerts {
    store: Arc<dyn Store>,
    http: reqwest::Client,
    timeout: Duration,
    /// What deliveries are dated by.
    clock: Clock,
    activity: ServiceActivity,
    /// This node, which sends the alerts it raises.
    node: Option<String>,
}

#[async_trait::async_trait]
impl Outbox for Alerts {
    type Key = EndpointName;
    type Id = AlertId;
    type Item = AlertRow;

    async fn adopt(
        &self,
        node: Option<&str>,
        up: &[String],
    ) -> anyhow::Result<Vec<(EndpointName, AlertId)>> {
        Ok(self.store.adopt_alerts(node, up).await?)
    }

    /// Gone with its endpoint, or no longer pending: not sent again.
    async fn load(&self, id: &AlertId) -> anyhow::Result<Option<(AlertRow, u32)>> {
        let row = self.store.alert(*id).await?;
        Ok(row.filter(|r| r.status == AlertStatus::Pending).map(|r| {
            let made = u32::try_from(r.attempts).unwrap_or(u32::MAX);
            (r, made)
        }))
    }

    async fn attempt(&self, id: &AlertId, row: &AlertRow, attempt: u32) -> Result<(), String> {
        let body = serde_json::json!({ "text": row.text });
        let error = match self.http.post(&row.webhook_url).json(&body).send().await {
            Ok(res) if res.status().is_success() => None,
            Ok(res) => Some(format!("the webhook answered {}", res.status())),
            Err(e) if e.is_timeout() => Some(format!(
                "the webhook did not answer within {} ms",
                self.timeout.as_millis()
            )),
            Err(e) => Some(format!(
                "the webhook could not be reached: {}",
                kep_core::outbound::error_text(e)
            )),
        };
        let (status, sent_at) = match &error {
            None => (AlertStatus::Sent, Some(self.clock.unix_ms())),
            Some(_) => (AlertStatus::Pending, None),
        };
        if error.is_none() {
            let detail =
                json!({ "id": id.0, "condition": row.condition.as_str(), "attempt": attempt });
            self.activity.record("alert.sent", &ids(row), detail);
        }
        self.record(*id, status, attempt, error.as_deref(), sent_at)
            .await;
        error.map_or(Ok(()), Err)
    }

    async fn give_up(&self, id: &AlertId, attempts: u32, error: &str) {
        self.record(*id, AlertStatus::Failed, attempts, Some(error), None)
            .await;
        if let Ok(Some(row)) = self.store.alert(*id).await {
            let detail = json!({ "id": id.0, "condition": row.condition.as_str(), "attempts": attempts, "error": error });
            self.activity.record("alert.failed", &ids(&row), detail);
        }
    }
}

impl Alerts {
    async fn record(
        &self,
        id: AlertId,
        status: AlertStatus,
        attempts: u32,
        error: Option<&str>,
        sent_at: Option<i64>,
    ) {
        if let Err(e) = self
            .store
            .alert_attempted(id, status, i64::from(attempts), error, sent_at)
            .await
        {
            tracing::error!(id = id.0, error = %e, "recording an alert delivery");
        }
    }
}
