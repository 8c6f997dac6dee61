//! Alert delivery: each alert is written down first, then posted as `{"text": …}` to the
//! webhook by its endpoint's worker, retried with back-off until the budget is spent.
//! One worker per endpoint keeps an endpoint's alerts in order, and a slow webhook from
//! holding up another endpoint's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kep_core::clock::Clock;
use kep_core::retry::Backoff;
use tokio::sync::mpsc;

use crate::ids::{AlertId, EndpointName};
use crate::kinds::AlertStatus;
use crate::store::{AlertRow, NewAlert, Store};

#[derive(Debug, Clone, Copy)]
pub struct DeliveryPolicy {
    /// Attempts per alert, the first included.
    pub attempts: u32,
    /// Waits between attempts.
    pub retry: Backoff,
    /// How long one attempt may take.
    pub timeout: Duration,
    /// Alerts waiting per endpoint; one more is recorded as failed.
    pub queue: usize,
}

pub struct Delivery {
    store: Arc<dyn Store>,
    http: reqwest::Client,
    policy: DeliveryPolicy,
    /// What alerts and their deliveries are dated by.
    clock: Clock,
    workers: Mutex<HashMap<EndpointName, mpsc::Sender<AlertId>>>,
}

impl Delivery {
    pub fn new(
        store: Arc<dyn Store>,
        policy: DeliveryPolicy,
        clock: Clock,
    ) -> anyhow::Result<Delivery> {
        let http = reqwest::Client::builder()
            .timeout(policy.timeout)
            .connect_timeout(policy.timeout)
            .build()?;
        Ok(Delivery {
            store,
            http,
            policy,
            clock,
            workers: Mutex::default(),
        })
    }

    /// Queues the alerts a previous run had not delivered.
    pub async fn resume(&self) -> anyhow::Result<()> {
        for row in self.store.pending_alerts().await? {
            self.queue(&row.endpoint, row.id).await;
        }
        Ok(())
    }

    /// Records the alert as pending, then queues it.
    pub async fn send(&self, alert: &NewAlert, webhook_url: &str) {
        match self
            .store
            .insert_alert(alert, webhook_url, self.clock.unix_ms())
            .await
        {
            Ok(id) => self.queue(&alert.endpoint, id).await,
            Err(e) => tracing::error!(endpoint = %alert.endpoint, error = %e, "recording an alert"),
        }
    }

    async fn queue(&self, endpoint: &EndpointName, id: AlertId) {
        let tx = {
            let mut workers = self
                .workers
                .lock()
                .expect("the workers lock is never poisoned");
            workers
                .entry(endpoint.clone())
                .or_insert_with(|| {
                    let (tx, rx) = mpsc::channel(self.policy.queue);
                    tokio::spawn(worker(
                        self.store.clone(),
                        self.http.clone(),
                        self.policy,
                        self.clock.clone(),
                        rx,
                    ));
                    tx
                })
                .clone()
        };
        if tx.try_send(id).is_err() {
            let error = format!("the alert queue of {} alerts is full", self.policy.queue);
            tracing::warn!(%endpoint, id = id.0, "{error}");
            let _ = self
                .store
                .alert_attempted(id, AlertStatus::Failed, 0, Some(&error), None)
                .await;
        }
    }

    /// Ends the workers of endpoints `keep` does not name (deleted ones), once their
    /// queues are empty.
    pub fn retain(&self, keep: impl Fn(&EndpointName) -> bool) {
        self.workers
            .lock()
            .expect("the workers lock is never poisoned")
            .retain(|e, _| keep(e));
    }
}

async fn worker(
    store: Arc<dyn Store>,
    http: reqwest::Client,
    policy: DeliveryPolicy,
    clock: Clock,
    mut rx: mpsc::Receiver<AlertId>,
) {
    while let Some(id) = rx.recv().await {
        match store.alert(id).await {
            Ok(Some(row)) => deliver(store.as_ref(), &http, policy, &clock, row).await,
            Ok(None) => {} // its endpoint was deleted meanwhile
            Err(e) => tracing::error!(id = id.0, error = %e, "reading an alert"),
        }
    }
}

async fn deliver(
    store: &dyn Store,
    http: &reqwest::Client,
    policy: DeliveryPolicy,
    clock: &Clock,
    row: AlertRow,
) {
    let body = serde_json::json!({ "text": row.text });
    let mut waits = policy.retry.waits();
    let mut attempts = row.attempts;
    loop {
        attempts += 1;
        let error = match http.post(&row.webhook_url).json(&body).send().await {
            Ok(res) if res.status().is_success() => None,
            Ok(res) => Some(format!("the webhook answered {}", res.status())),
            Err(e) if e.is_timeout() => Some(format!(
                "the webhook did not answer within {} ms",
                policy.timeout.as_millis()
            )),
            Err(e) => Some(format!("the webhook could not be reached: {e}")),
        };
        let (status, sent_at) = match &error {
            None => (AlertStatus::Sent, Some(clock.unix_ms())),
            Some(_) if attempts >= i64::from(policy.attempts) => (AlertStatus::Failed, None),
            Some(_) => (AlertStatus::Pending, None),
        };
        if let Err(e) = store
            .alert_attempted(row.id, status, attempts, error.as_deref(), sent_at)
            .await
        {
            tracing::error!(id = row.id.0, error = %e, "recording an alert delivery");
        }
        match error {
            None => return,
            Some(error) if status == AlertStatus::Failed => {
                tracing::warn!(endpoint = %row.endpoint, id = row.id.0, attempts, %error, "alert not delivered");
                return;
            }
            Some(error) => {
                tracing::debug!(endpoint = %row.endpoint, id = row.id.0, attempts, %error, "alert delivery failed; retrying");
                tokio::time::sleep(waits.next_wait()).await;
            }
        }
    }
}
