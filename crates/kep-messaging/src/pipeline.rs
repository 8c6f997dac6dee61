//! The delivery pipeline: a dispatcher hands messages to a carrier connector with bounded
//! concurrency and records the outcome. A message is stored already claimed by the node
//! that accepted it, which offers it to its own dispatcher; the dispatcher also claims what
//! is due from the durable queue (the `messages` table): retries, and what a node that died
//! held, once its lease ran out. So nothing accepted is lost, and a message costs no claim
//! of its own on the way in.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kep_core::activity::ServiceActivity;
use kep_core::clock::Clock;
use kep_core::retry::Backoff;
use kep_core::service::Context;
use serde_json::json;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::task::TaskTracker;

use crate::ids::MessageUid;
use crate::model::{CarrierCode, Channel, FallbackStatus, RcsStatus, Route, Status};
use crate::store::{Handover, MessageRow, Store};
use crate::writer::Writer;

/// A message's object in the activity: `<clientId>/<uid>`.
fn object(m: &MessageRow) -> String {
    format!("{}/{}", m.client_id, m.uid)
}

/// What the carrier made of one hand-over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CarrierOutcome {
    Delivered,
    /// Failed (510).
    Failed,
    /// Failed but can be resent (520).
    Resendable,
    /// The number has no RCS.
    NoRcs,
}

impl CarrierOutcome {
    fn code(self) -> CarrierCode {
        match self {
            CarrierOutcome::Delivered => CarrierCode::Delivered,
            CarrierOutcome::Failed | CarrierOutcome::NoRcs => CarrierCode::Failed,
            CarrierOutcome::Resendable => CarrierCode::Resendable,
        }
    }
}

/// A connector that delivers to the mobile carriers. `Err` is a transient failure (the
/// connector could not reach the carrier): the message is tried again later.
pub trait Carrier: Send + Sync + 'static {
    /// What the outbox records a hand-over went to.
    fn name(&self) -> &str;

    fn deliver(
        &self,
        route: Route,
        phone_number: &str,
        payload: &str,
    ) -> impl Future<Output = Result<CarrierOutcome, String>> + Send;
}

/// The built-in carrier of CONTRACT §4: it decides by the last four digits of the number.
pub struct Simulator {
    pub delay: Duration,
}

impl Carrier for Simulator {
    fn name(&self) -> &str {
        "simulator"
    }

    async fn deliver(
        &self,
        route: Route,
        phone_number: &str,
        _payload: &str,
    ) -> Result<CarrierOutcome, String> {
        tokio::time::sleep(self.delay).await;
        let last4 = &phone_number[phone_number.len().saturating_sub(4)..];
        Ok(match last4 {
            "0000" => CarrierOutcome::Failed,
            "0001" => CarrierOutcome::Resendable,
            "0002" if route == Route::Rcs => CarrierOutcome::NoRcs,
            _ => CarrierOutcome::Delivered,
        })
    }
}

#[derive(Debug, Clone)]
pub struct DispatchPolicy {
    pub concurrency: usize,
    /// How long a claimed message is held before another claim may take it.
    pub lease: Duration,
    /// Transient failures are retried this many times, backing off between them.
    pub max_attempts: i64,
    pub backoff: Backoff,
}

pub struct Dispatcher<C> {
    store: Arc<dyn Store>,
    writer: Writer,
    carrier: C,
    policy: DispatchPolicy,
    clock: Clock,
    /// Messages this node accepted, claimed for it as they were stored.
    offered: mpsc::UnboundedSender<MessageRow>,
    accepted: Mutex<Option<mpsc::UnboundedReceiver<MessageRow>>>,
    /// Messages this process is delivering: a claim whose lease ran out while the carrier
    /// is still busy with it must not hand it over a second time.
    in_flight: Mutex<HashSet<MessageUid>>,
    /// The deliveries under way: a stop lets them finish and record what the carrier said
    /// (one cut off is delivered again when its lease runs out).
    deliveries: TaskTracker,
    activity: ServiceActivity,
}

impl<C: Carrier> Dispatcher<C> {
    pub fn new(
        store: Arc<dyn Store>,
        writer: Writer,
        carrier: C,
        policy: DispatchPolicy,
        ctx: &Context,
    ) -> Arc<Self> {
        let (offered, accepted) = mpsc::unbounded_channel();
        Arc::new(Dispatcher {
            store,
            writer,
            carrier,
            policy,
            clock: ctx.clock.clone(),
            deliveries: ctx.tasks.clone(),
            offered,
            accepted: Mutex::new(Some(accepted)),
            in_flight: Mutex::default(),
            activity: ctx
                .activity
                .of(<crate::MessagingService as kep_core::service::Service>::NAME),
        })
    }

    /// A message this node just stored, claimed for it ([`crate::writer::Writer::insert`]).
    pub fn offer(&self, m: MessageRow) {
        let _ = self.offered.send(m);
    }

    fn lease_ms(&self) -> i64 {
        i64::try_from(self.policy.lease.as_millis()).unwrap_or(i64::MAX)
    }

    /// Runs until the process ends.
    pub async fn run(self: Arc<Self>) {
        let permits = Arc::new(Semaphore::new(self.policy.concurrency.max(1)));
        let lease_ms = self.lease_ms();
        let mut accepted = self
            .accepted
            .lock()
            .expect("accepted lock")
            .take()
            .expect("a dispatcher runs once");
        // Due messages (retries, and what a node that died held) are claimed on a timer, not
        // after every accepted message: each claim is a query.
        let mut claim_at = tokio::time::Instant::now();
        loop {
            tokio::select! {
                Some(m) = accepted.recv() => {
                    let claimed_until = m.reg_date.saturating_add(lease_ms);
                    self.start(m, Some(claimed_until), &permits).await;
                    continue;
                }
                () = tokio::time::sleep_until(claim_at) => {}
            }
            let free = i64::try_from(permits.available_permits()).unwrap_or(0);
            let due = if free == 0 {
                Vec::new()
            } else {
                match self
                    .store
                    .claim_due(self.clock.unix_ms(), lease_ms, free)
                    .await
                {
                    Ok(due) => due,
                    Err(e) => {
                        tracing::warn!(error = %e, "claiming due messages");
                        Vec::new()
                    }
                }
            };
            // A full claim may have left more: the next one comes at once.
            let full = free > 0 && i64::try_from(due.len()).unwrap_or(0) == free;
            claim_at = tokio::time::Instant::now()
                + if full {
                    Duration::ZERO
                } else {
                    Duration::from_millis(100)
                };
            for m in due {
                self.start(m, None, &permits).await;
            }
        }
    }

    /// Delivers `m` once a permit is free. A message offered at its acceptance goes only
    /// while half its claim is left: one that waited longer is left to be claimed again
    /// when its claim runs out, rather than handed over as another node may take it.
    async fn start(
        self: &Arc<Self>,
        m: MessageRow,
        claimed_until: Option<i64>,
        permits: &Arc<Semaphore>,
    ) {
        if !self
            .in_flight
            .lock()
            .expect("in-flight lock")
            .insert(m.uid.clone())
        {
            return;
        }
        let permit = Arc::clone(permits)
            .acquire_owned()
            .await
            .expect("semaphore open");
        if claimed_until.is_some_and(|until| until - self.clock.unix_ms() < self.lease_ms() / 2) {
            self.in_flight
                .lock()
                .expect("in-flight lock")
                .remove(&m.uid);
            return;
        }
        let me = Arc::clone(self);
        self.deliveries.spawn(async move {
            let uid = m.uid.clone();
            me.process(m).await;
            me.in_flight.lock().expect("in-flight lock").remove(&uid);
            drop(permit);
        });
    }

    /// Hands `route`'s payload to the carrier; `None` when the carrier could not be
    /// reached and the message was put back for a retry.
    async fn hand_over(
        &self,
        m: &mut MessageRow,
        route: Route,
        handovers: &mut Vec<Handover>,
    ) -> Option<CarrierOutcome> {
        let started = std::time::Instant::now();
        let outcome = self
            .carrier
            .deliver(route, &m.phone_number, &m.request)
            .await;
        metrics::histogram!("kep_messaging_handover_seconds", "route" => route.as_str())
            .record(started.elapsed());
        let now = self.clock.unix_ms();
        let outcome = match outcome {
            Ok(o) => o,
            Err(why) if m.attempts < self.policy.max_attempts => {
                let backoff = self
                    .policy
                    .backoff
                    .wait_after(u32::try_from(m.attempts).unwrap_or(u32::MAX));
                let at = now + i64::try_from(backoff.as_millis()).unwrap_or(i64::MAX);
                self.activity.record(
                    "message.retrying",
                    object(m),
                    json!({ "route": route.as_str(), "attempt": m.attempts, "why": why, "at": at }),
                );
                if let Err(e) = self.store.retry_at(&m.uid, at).await {
                    tracing::warn!(error = %e, "scheduling a retry");
                }
                return None;
            }
            Err(why) => {
                m.error_message = Some(format!("carrier unreachable: {why}"));
                CarrierOutcome::Failed
            }
        };
        m.sent_date.get_or_insert(now);
        self.activity.record(
            "message.handed_over",
            object(m),
            json!({ "route": route.as_str(), "attempt": m.attempts, "result": outcome.code().as_str() }),
        );
        handovers.push(Handover {
            route,
            outcome: outcome.code(),
            at: now,
            carrier: self.carrier.name().to_owned(),
        });
        Some(outcome)
    }

    async fn process(&self, mut m: MessageRow) {
        let request = (m.channel == Channel::Rcs)
            .then(|| serde_json::from_str::<serde_json::Value>(&m.request).unwrap_or_default());
        let mut handovers = Vec::new();
        // An RCS message its carrier would refuse fails without being handed over.
        let refused = request
            .as_ref()
            .and_then(|r| crate::rcs::undeliverable(m.message_type, r));
        let outcome = match refused {
            Some(why) => {
                m.error_message = Some(why);
                CarrierOutcome::Failed
            }
            None => {
                let route = m.channel.route();
                let Some(outcome) = self.hand_over(&mut m, route, &mut handovers).await else {
                    return;
                };
                outcome
            }
        };
        let mut last = outcome;
        if let Some(request) = &request {
            let delivered = outcome == CarrierOutcome::Delivered;
            m.rcs_status = Some(if delivered {
                RcsStatus::Success
            } else {
                RcsStatus::Fail
            });
            let fall_back = request["fall_back_yn"].as_bool().unwrap_or(false);
            if !delivered && fall_back {
                let route = match request["fall_back_message_type"].as_str() {
                    Some("LM") => Route::FallbackLm,
                    _ => Route::FallbackSm,
                };
                let Some(fallback) = self.hand_over(&mut m, route, &mut handovers).await else {
                    return;
                };
                m.fallback_status = Some(if fallback == CarrierOutcome::Delivered {
                    FallbackStatus::Success
                } else {
                    FallbackStatus::Fail
                });
                m.sms_status_code = Some(fallback.code());
                last = fallback;
            }
        } else {
            m.sms_status_code = Some(outcome.code());
        }
        // The message's status is the outcome of its last attempt.
        let status = last.code().status();
        if status != Status::Delivered && m.error_message.is_none() {
            m.error_message = Some(
                match last {
                    CarrierOutcome::Resendable => "failed; may be resent",
                    CarrierOutcome::NoRcs => "no RCS on this number",
                    _ => "failed to send",
                }
                .to_owned(),
            );
        }
        m.status = status;
        m.res_date = Some(self.clock.unix_ms());
        metrics::counter!("kep_messaging_finished_total", "status" => status.as_str()).increment(1);
        self.activity.record(
            "message.finished",
            object(&m),
            json!({ "status": status.as_str(), "error": m.error_message }),
        );
        self.writer.finish(m, handovers);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::ids::ClientId;
    use crate::writer::Writer;

    /// A connector that cannot reach the carrier the first `failures` times.
    struct Flaky {
        failures: usize,
        calls: Arc<AtomicUsize>,
    }

    impl Carrier for Flaky {
        fn name(&self) -> &str {
            "flaky"
        }

        async fn deliver(&self, _: Route, _: &str, _: &str) -> Result<CarrierOutcome, String> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            if n < self.failures {
                Err("connection refused".into())
            } else {
                Ok(CarrierOutcome::Delivered)
            }
        }
    }

    async fn deliver_with(failures: usize, max_attempts: i64) -> (MessageRow, usize) {
        let dir = tempfile::tempdir().unwrap();
        let ctx = Context::standalone(dir.path());
        let store = crate::store::open(&ctx).await.unwrap();
        store
            .insert_client(&ClientId::from("c"), None, "h", 0)
            .await
            .unwrap();
        let writer = Writer::start(store.clone(), crate::writer::Claim(30_000));
        let calls = Arc::new(AtomicUsize::new(0));
        let policy = DispatchPolicy {
            concurrency: 4,
            lease: Duration::from_secs(30),
            max_attempts,
            backoff: Backoff::from_first(Duration::from_millis(10)),
        };
        let dispatcher = Dispatcher::new(
            store.clone(),
            writer.clone(),
            Flaky {
                failures,
                calls: calls.clone(),
            },
            policy,
            &ctx,
        );
        tokio::spawn(Arc::clone(&dispatcher).run());
        let now = ctx.clock.unix_ms();
        let row = MessageRow {
            uid: crate::time::Uids::new(ctx.clock.clone(), 0).next(),
            client_id: "c".into(),
            cid: "x".into(),
            channel: Channel::Xms,
            message_type: crate::model::MessageType::Sm,
            phone_number: "821012345678".into(),
            request: "{}".into(),
            request_hash: "h".into(),
            status: Status::Accepted,
            rcs_status: None,
            fallback_status: None,
            sms_status_code: None,
            error_message: None,
            attempts: 1,
            reg_date: now,
            req_date: Some(now),
            sent_date: None,
            res_date: None,
        };
        let uid = row.uid.clone();
        writer.insert(row.clone()).await.unwrap();
        dispatcher.offer(row);
        for _ in 0..300 {
            let m = store
                .message(&ClientId::from("c"), Channel::Xms, &uid)
                .await
                .unwrap()
                .unwrap();
            if m.status != Status::Accepted {
                return (m, calls.load(Ordering::SeqCst));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("never finished");
    }

    #[tokio::test]
    async fn an_unreachable_carrier_is_retried_with_back_off() {
        let (m, calls) = deliver_with(2, 5).await;
        assert_eq!((m.status.as_str(), m.attempts, calls), ("200", 3, 3));
    }

    #[tokio::test]
    async fn retries_end_in_a_failure_after_the_last_attempt() {
        let (m, calls) = deliver_with(10, 3).await;
        assert_eq!((m.status.as_str(), calls), ("510", 3));
        assert!(m.error_message.unwrap().starts_with("carrier unreachable"));
    }
}
