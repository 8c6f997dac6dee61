//! Webhook delivery, an outbox of the platform's one shape ([`kep_core::outbox`]): a room's
//! events go out one at a time and in order, rooms never wait for each other, and an event
//! is tried again with back-off until it is delivered or its budget (attempts, age) is
//! spent. A receiver that answers 410 Gone turns the webhook off.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use hmac::{Hmac, Mac};
use kep_core::clock::Clock;
use kep_core::outbox::{Outbox, Policy};
use sha2::Sha256;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::store::{Store, WebhookAttempt, WebhookEventRow};

#[derive(Debug, Clone, Copy)]
pub struct DeliveryPolicy {
    /// Attempts, back-off, and the events waiting per room (one more is given up at once).
    pub outbox: Policy,
    /// An event older than this is given up rather than tried again.
    pub max_age: Duration,
    /// How long one attempt may take.
    pub timeout: Duration,
}

pub(super) struct Deliveries {
    store: Arc<dyn Store>,
    hooks: Arc<super::Hooks>,
    /// The events written down and not yet out (the writer's); a miss is read from the
    /// store (an event a previous run left).
    unsent: Arc<DashMap<i64, Arc<WebhookEventRow>>>,
    /// To the recorder, which writes outcomes down in batches.
    outcomes: mpsc::UnboundedSender<WebhookAttempt>,
    http: reqwest::Client,
    policy: DeliveryPolicy,
    clock: Clock,
    /// The other nodes, told when a webhook is turned off.
    cluster: kep_core::cluster::Cluster,
}

impl Deliveries {
    pub(super) fn new(
        store: Arc<dyn Store>,
        hooks: Arc<super::Hooks>,
        unsent: Arc<DashMap<i64, Arc<WebhookEventRow>>>,
        outcomes: mpsc::UnboundedSender<WebhookAttempt>,
        policy: DeliveryPolicy,
        clock: Clock,
        cluster: kep_core::cluster::Cluster,
    ) -> anyhow::Result<Self> {
        // A redirect is not followed: the receiver is the URL the operator set.
        let http = kep_core::outbound::client(policy.timeout)?;
        Ok(Deliveries {
            store,
            hooks,
            unsent,
            outcomes,
            http,
            policy,
            clock,
            cluster,
        })
    }

    /// An attempt's outcome: kept for the next attempt while pending, forgotten once out;
    /// written down by the recorder.
    fn record(&self, seq: i64, status: &'static str, attempts: u32, error: Option<&str>) {
        let attempts = i64::from(attempts);
        if status == PENDING {
            if let Some(mut row) = self.unsent.get_mut(&seq) {
                let row = Arc::make_mut(&mut row);
                row.attempts = attempts;
                row.last_error = error.map(str::to_owned);
            }
        } else {
            self.unsent.remove(&seq);
        }
        let _ = self.outcomes.send(WebhookAttempt {
            seq,
            status,
            attempts,
            error: error.map(str::to_owned),
            delivered_at: (status == DELIVERED).then(|| self.clock.unix_ms()),
        });
    }

    /// Turns the service's webhook off, saying why.
    async fn disable(&self, service_id: &str, why: String) {
        let Some(hook) = self.hooks.get(service_id).map(|h| Arc::clone(&h)) else {
            return;
        };
        let mut hook = (*hook).clone();
        hook.enabled = false;
        hook.disabled_reason = Some(why);
        match self.store.put_webhook(&hook, self.clock.unix_s()).await {
            Ok(()) => {
                tracing::warn!(service = service_id, reason = ?hook.disabled_reason, "webhook turned off");
                self.hooks.insert(service_id.to_owned(), Arc::new(hook));
                super::announce(&self.cluster, service_id).await;
            }
            Err(e) => tracing::error!(service = service_id, error = %e, "turning a webhook off"),
        }
    }
}

const PENDING: &str = "pending";
const DELIVERED: &str = "delivered";
const FAILED: &str = "failed";

/// `Kep-Signature`: `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
pub fn signature(secret: &str, t: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(format!("{t}.").as_bytes());
    mac.update(body.as_bytes());
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

#[async_trait::async_trait]
impl Outbox for Deliveries {
    type Key = String;
    type Id = i64;
    type Item = Arc<WebhookEventRow>;

    async fn adopt(&self, node: Option<&str>, up: &[String]) -> anyhow::Result<Vec<(String, i64)>> {
        let rows = self.store.adopt_webhook_events(node, up).await?;
        Ok(rows
            .into_iter()
            .map(|(service, room, seq)| (super::room_key(service.as_str(), &room), seq))
            .collect())
    }

    /// No longer pending, or past its budget of age, or its webhook is off: not sent.
    async fn load(&self, seq: &i64) -> anyhow::Result<Option<(Arc<WebhookEventRow>, u32)>> {
        let cached = self.unsent.get(seq).map(|r| Arc::clone(&r));
        let row = match cached {
            Some(row) => row,
            None => match self.store.webhook_event(*seq).await? {
                Some(row) => Arc::new(row),
                None => return Ok(None),
            },
        };
        if row.status != PENDING {
            return Ok(None);
        }
        let made = u32::try_from(row.attempts).unwrap_or(u32::MAX);
        let hook = self
            .hooks
            .get(row.service_id.as_str())
            .map(|h| Arc::clone(&h));
        let why_not = match hook {
            Some(h) if h.enabled => {
                let age = self.clock.unix_ms().saturating_sub(row.at);
                (age > self.policy.max_age.as_millis() as i64).then(|| {
                    format!(
                        "given up after {} s, older than the budget of {} s",
                        age / 1000,
                        self.policy.max_age.as_secs()
                    )
                })
            }
            Some(h) => Some(format!(
                "the webhook is off{}",
                h.disabled_reason
                    .as_ref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            )),
            None => Some("the service has no webhook".to_owned()),
        };
        if let Some(why) = why_not {
            self.record(*seq, FAILED, made, Some(&why));
            return Ok(None);
        }
        Ok(Some((row, made)))
    }

    async fn attempt(
        &self,
        seq: &i64,
        row: &Arc<WebhookEventRow>,
        attempt: u32,
    ) -> Result<(), String> {
        let Some(hook) = self
            .hooks
            .get(row.service_id.as_str())
            .map(|h| Arc::clone(&h))
        else {
            self.record(
                *seq,
                FAILED,
                attempt - 1,
                Some("the service has no webhook"),
            );
            return Ok(());
        };
        let signed = signature(&hook.secret, self.clock.unix_s(), &row.body);
        let sent = self
            .http
            .post(&hook.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("Kep-Signature", signed)
            .body(row.body.clone())
            .send()
            .await;
        let error = match sent {
            Ok(res) if res.status().is_success() => None,
            Ok(res) if res.status() == reqwest::StatusCode::GONE => {
                let why = format!(
                    "the receiver answered 410 Gone to event {} at {}",
                    row.id,
                    self.clock.unix_s()
                );
                self.record(*seq, FAILED, attempt, Some(&why));
                self.disable(row.service_id.as_str(), why).await;
                return Ok(());
            }
            Ok(res) if res.status().is_redirection() => Some(format!(
                "the receiver answered {} (a redirect is not followed)",
                res.status()
            )),
            Ok(res) => Some(format!("the receiver answered {}", res.status())),
            Err(e) if e.is_timeout() => Some(format!(
                "the receiver did not answer within {} ms",
                self.policy.timeout.as_millis()
            )),
            Err(e) => Some(format!(
                "the receiver could not be reached: {}",
                kep_core::outbound::error_text(e)
            )),
        };
        match error {
            None => {
                self.record(*seq, DELIVERED, attempt, None);
                Ok(())
            }
            Some(error) => {
                self.record(*seq, PENDING, attempt, Some(&error));
                Err(error)
            }
        }
    }

    async fn give_up(&self, seq: &i64, attempts: u32, error: &str) {
        self.record(*seq, FAILED, attempts, Some(error));
    }
}

/// Writes the attempts' outcomes down in batches, in the order they came. At the platform's
/// stop it writes down what is queued, and ends.
pub(super) async fn record(
    mut outcomes: mpsc::UnboundedReceiver<WebhookAttempt>,
    store: Arc<dyn Store>,
    shutdown: CancellationToken,
) {
    let mut batch = Vec::with_capacity(super::BATCH);
    loop {
        let stopping = tokio::select! {
            n = outcomes.recv_many(&mut batch, super::BATCH) => {
                if n == 0 {
                    return;
                }
                false
            }
            () = shutdown.cancelled() => {
                while let Ok(o) = outcomes.try_recv() {
                    batch.push(o);
                }
                true
            }
        };
        if let Err(e) = store.webhook_attempted(&batch).await {
            tracing::error!(outcomes = batch.len(), error = %e, "recording webhook deliveries");
        }
        if stopping {
            return;
        }
        batch.clear();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_signature_is_hmac_sha256_of_time_dot_body() {
        // As Python's hmac computes it: hmac.new(b"key", b'1700000000.{"id":"e1"}', sha256).
        assert_eq!(
            super::signature("key", 1_700_000_000, r#"{"id":"e1"}"#),
            "t=1700000000,v1=bef8ad98fc8bc281e228c29d99d0b38086051703dbf3bbb8b3fee5b801ad1976"
        );
    }
}
