//! The delivery pipeline: a dispatcher hands messages to the carriers with bounded
//! concurrency and records the outcome. A message is stored already claimed by the node
//! that accepted it, which offers it to its own dispatcher; the dispatcher also claims what
//! is due from the durable queue (the `messages` table): retries, what a node that died
//! held once its lease ran out, and hand-overs whose receipts did not come in time. So
//! nothing accepted is lost, and a message costs no claim of its own on the way in.
//!
//! A carrier decides at once (the simulator) or acknowledges the hand-over and lets its
//! delivery receipts decide ([`receipts`]): the message then waits in the queue, no longer
//! claimed, until they come or its receipt deadline passes.

pub(crate) mod receipts;
pub(crate) mod writer;

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kep_core::activity::ServiceActivity;
use kep_core::clock::Clock;
use kep_core::retry::Backoff;
use kep_core::service::Context;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::task::TaskTracker;

use crate::carriers::{CarrierOutcome, Carriers, Outgoing, Submitted};
use crate::ids::MessageUid;
use crate::kinds::{Channel, FallbackStatus, MessageType, RcsStatus, Route, Status};
use crate::store::{Handed, Handover, MessageRow, Store};
use receipts::{Awaiting, Parts};
use writer::Writer;

/// A message's ids in the activity: its client's, its own.
fn object_ids(m: &MessageRow) -> [&dyn std::fmt::Display; 2] {
    [&m.client_id, &m.uid]
}

/// Where the dispatcher hands messages: the configured carriers ([`Carriers`]), or a test's
/// own. `Err` is a transient failure (no carrier could be reached): tried again later.
pub trait Carrier: Send + Sync + 'static {
    fn hand_over(
        &self,
        o: &Outgoing<'_>,
    ) -> impl Future<Output = Result<(Arc<str>, Submitted), String>> + Send;
}

impl Carrier for Carriers {
    async fn hand_over(&self, o: &Outgoing<'_>) -> Result<(Arc<str>, Submitted), String> {
        Carriers::hand_over(self, o).await
    }
}

#[derive(Debug, Clone)]
pub struct DispatchPolicy {
    pub concurrency: usize,
    /// How long a claimed message is held before another claim may take it.
    pub lease: Duration,
    /// How long a message whose carriers cannot be reached is tried again (from its
    /// acceptance), backing off between tries, before it ends 520.
    pub retry_for: Duration,
    pub backoff: Backoff,
    /// How long an acknowledged hand-over waits for its receipts before it ends 520.
    pub receipt_timeout: Duration,
    /// Whether receipts are matched in this process's memory first: only where it is the
    /// only node (on PostgreSQL a receipt may come to another node than the hand-over).
    pub receipts_in_memory: bool,
}

/// A message on its way: its row, its parsed request and its hand-overs so far.
pub(crate) struct Delivery {
    pub m: MessageRow,
    pub request: Value,
    pub handovers: Vec<Handover>,
}

impl Delivery {
    pub fn new(m: MessageRow) -> Self {
        let request = serde_json::from_str(&m.request).unwrap_or_default();
        Delivery {
            m,
            request,
            handovers: Vec::new(),
        }
    }

    /// What `route` hands to the carrier: the message, or its fallback as SM or LM.
    fn outgoing(&self, route: Route) -> Outgoing<'_> {
        let r = &self.request;
        let field = |name: &str| r[name].as_str().filter(|s| !s.is_empty());
        let (message_type, title, text) = match route {
            Route::Xms => (self.m.message_type, field("title"), field("message")),
            Route::FallbackSm => (MessageType::Sm, None, field("fall_back_message")),
            Route::FallbackLm => (
                MessageType::Lm,
                field("fall_back_title"),
                field("fall_back_message"),
            ),
            Route::Rcs => (self.m.message_type, None, Some(self.m.request.as_str())),
        };
        // A text carrier has no subject line: a title goes first, on a line of its own.
        let text = match title {
            Some(title) => format!("{title}\n{}", text.unwrap_or_default()),
            None => text.unwrap_or_default().to_owned(),
        };
        Outgoing {
            route,
            message_type,
            phone_number: &self.m.phone_number,
            source: field("sender_no"),
            text,
        }
    }
}

/// What comes after a hand-over's outcome.
pub(crate) enum Next {
    HandOver(Route),
    Finish(CarrierOutcome),
}

pub struct Dispatcher<C> {
    pub(crate) store: Arc<dyn Store>,
    writer: Writer,
    carrier: C,
    pub(crate) policy: DispatchPolicy,
    pub(crate) clock: Clock,
    /// Messages this node accepted, claimed for it as they were stored: the writer hands
    /// each over once committed ([`Writer::start`]).
    accepted: Mutex<Option<mpsc::UnboundedReceiver<MessageRow>>>,
    /// Messages this process is delivering: a claim whose lease ran out while the carrier
    /// is still busy with it must not hand it over a second time.
    in_flight: Mutex<HashSet<MessageUid>>,
    /// Hand-overs this process made whose receipts are awaited.
    pub(crate) awaiting: Mutex<Awaiting>,
    /// The deliveries under way: a stop lets them finish and record what the carrier said
    /// (one cut off is delivered again when its lease runs out).
    pub(crate) deliveries: TaskTracker,
    pub(crate) activity: ServiceActivity,
}

impl<C: Carrier> Dispatcher<C> {
    pub fn new(
        store: Arc<dyn Store>,
        writer: Writer,
        carrier: C,
        policy: DispatchPolicy,
        accepted: mpsc::UnboundedReceiver<MessageRow>,
        ctx: &Context,
    ) -> Arc<Self> {
        Arc::new(Dispatcher {
            store,
            writer,
            carrier,
            policy,
            clock: ctx.clock.clone(),
            deliveries: ctx.tasks.clone(),
            accepted: Mutex::new(Some(accepted)),
            in_flight: Mutex::default(),
            awaiting: Mutex::default(),
            activity: ctx.activity.of::<crate::MessagingService>(),
        })
    }

    pub fn carrier(&self) -> &C {
        &self.carrier
    }

    fn lease_ms(&self) -> i64 {
        ms(self.policy.lease)
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
                    self.accepted(&m);
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

    /// Counts a message this node just stored, and says so in the activity.
    fn accepted(&self, m: &MessageRow) {
        let channel = m.channel.as_str();
        metrics::counter!(crate::metrics::ACCEPTED, "channel" => channel).increment(1);
        self.activity.record(
            "message.accepted",
            &object_ids(m),
            json!({ "channel": channel, "messageType": m.message_type.as_str(), "cid": &m.cid }),
        );
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
        // A claim may come while this node's last records of the message are still being
        // written (its claim ran out meanwhile): its delivery has gone on, not stopped.
        if self.writer.is_unwritten(&m.uid)
            || !self
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
        let from_queue = claimed_until.is_none();
        self.deliveries.spawn(async move {
            let uid = m.uid.clone();
            if from_queue {
                me.resume(m).await;
            } else {
                me.deliver(Delivery::new(m), None).await;
            }
            me.in_flight.lock().expect("in-flight lock").remove(&uid);
            drop(permit);
        });
    }

    /// A message claimed from the queue: one that was handed over before goes on from its
    /// receipts (none in time: 520), any other from its first hand-over.
    async fn resume(self: &Arc<Self>, m: MessageRow) {
        let parts = match self.store.receipts_of(&m.uid).await {
            Ok(parts) => parts,
            Err(e) => {
                tracing::warn!(error = %e, "reading a message's hand-overs");
                return;
            }
        };
        let mut d = Delivery::new(m);
        let Some(progress) = receipts::progress(&parts) else {
            return self.deliver(d, None).await;
        };
        let deadline = progress
            .submitted_at
            .saturating_add(ms(self.policy.receipt_timeout));
        if progress.last.is_none() && self.clock.unix_ms() < deadline {
            // Claimed before its receipts were due: its hand-over's record came after its
            // claim ran out, or its receipt's outcome is still being written. It waits on
            // for them, still awaited here, until its deadline.
            if let Err(e) = self.store.retry_at(&d.m.uid, deadline).await {
                tracing::warn!(error = %e, "putting a message back to await its receipts");
            }
            return;
        }
        self.forget(&d.m.uid);
        d.handovers = progress.handovers;
        match progress.last {
            Some((route, outcome)) => self.go_on(d, route, outcome).await,
            None => {
                d.m.error_message =
                    Some("no delivery receipt in time (messaging.receipt_timeout_s)".into());
                self.finish(d, CarrierOutcome::Resendable);
            }
        }
    }

    /// Hands `d` over from `route` on (its first route when `None`) until it is final or
    /// waits: for a retry, or for receipts.
    pub(crate) async fn deliver(self: &Arc<Self>, mut d: Delivery, route: Option<Route>) {
        let mut route = match route {
            Some(r) => r,
            None => {
                let first = d.m.channel.route();
                // An RCS message its carrier would refuse fails without being handed over
                // (and may still fall back).
                let refused = (d.m.channel == Channel::Rcs)
                    .then(|| crate::rcs::undeliverable(d.m.message_type, &d.request))
                    .flatten();
                match refused {
                    None => first,
                    Some(why) => {
                        d.m.error_message = Some(why);
                        match self.next(&mut d, first, CarrierOutcome::Failed) {
                            Next::HandOver(r) => r,
                            Next::Finish(last) => return self.finish(d, last),
                        }
                    }
                }
            }
        };
        loop {
            let outcome = match self.hand_over(&mut d, route).await {
                Step::Decided(outcome) => outcome,
                Step::Waits => return,
            };
            match self.next(&mut d, route, outcome) {
                Next::HandOver(r) => route = r,
                Next::Finish(last) => return self.finish(d, last),
            }
        }
    }

    /// After receipts decided `route`: what comes next, in a task of its own.
    pub(crate) async fn go_on(
        self: &Arc<Self>,
        mut d: Delivery,
        route: Route,
        outcome: CarrierOutcome,
    ) {
        match self.next(&mut d, route, outcome) {
            Next::HandOver(r) => Box::pin(self.deliver(d, Some(r))).await,
            Next::Finish(last) => self.finish(d, last),
        }
    }

    /// Hands `route`'s message to the carriers.
    async fn hand_over(self: &Arc<Self>, d: &mut Delivery, route: Route) -> Step {
        let started = std::time::Instant::now();
        let result = self.carrier.hand_over(&d.outgoing(route)).await;
        metrics::histogram!("kep_messaging_handover_seconds", "route" => route.as_str())
            .record(started.elapsed());
        let now = self.clock.unix_ms();
        let m = &mut d.m;
        let (carrier, submitted) = match result {
            Ok(r) => r,
            Err(why) if now < m.reg_date.saturating_add(ms(self.policy.retry_for)) => {
                let backoff = self
                    .policy
                    .backoff
                    .wait_after(u32::try_from(m.attempts).unwrap_or(u32::MAX));
                let at = now + ms(backoff);
                self.activity.record(
                    "message.retrying",
                    &object_ids(m),
                    json!({ "route": route.as_str(), "attempt": m.attempts, "why": why, "at": at }),
                );
                if let Err(e) = self.store.retry_at(&m.uid, at).await {
                    tracing::warn!(error = %e, "scheduling a retry");
                }
                return Step::Waits;
            }
            Err(why) => {
                m.error_message = Some(format!("carrier unreachable: {why}"));
                return Step::Decided(CarrierOutcome::Resendable);
            }
        };
        m.sent_date.get_or_insert(now);
        let outcome = match submitted {
            Submitted::Final(outcome) => outcome,
            Submitted::Refused(why) => {
                m.error_message = Some(why);
                CarrierOutcome::Failed
            }
            Submitted::Receipts { account, ids } => {
                self.activity.record(
                    "message.handed_over",
                    &object_ids(m),
                    json!({ "route": route.as_str(), "attempt": m.attempts, "carrier": &*carrier, "parts": ids.len() }),
                );
                let parts = Parts {
                    carrier,
                    account,
                    ids,
                };
                self.await_receipts(d, route, parts, now);
                return Step::Waits;
            }
        };
        self.activity.record(
            "message.handed_over",
            &object_ids(m),
            json!({ "route": route.as_str(), "attempt": m.attempts, "carrier": &*carrier, "result": outcome.code().as_str() }),
        );
        d.handovers.push(Handover {
            route,
            outcome: outcome.code(),
            at: now,
            carrier: carrier.to_string(),
        });
        Step::Decided(outcome)
    }

    /// Records an acknowledged hand-over and leaves the message to its receipts.
    fn await_receipts(self: &Arc<Self>, d: &mut Delivery, route: Route, parts: Parts, now: i64) {
        let handed = Handed {
            uid: d.m.uid.clone(),
            route,
            attempt: d.m.attempts,
            carrier: parts.carrier.to_string(),
            account: parts.account.to_string(),
            carrier_message_ids: parts.ids.clone(),
            at: now,
            deadline: now.saturating_add(ms(self.policy.receipt_timeout)),
            rcs_status: d.m.rcs_status,
        };
        // Recorded first: a receipt held for it may decide it at once, and its record must
        // not come after the record of its outcome.
        self.writer.handed(handed);
        if self.policy.receipts_in_memory {
            // The caller is done with `d`: its request needs no parsing again.
            let placeholder = Delivery {
                m: d.m.clone(),
                request: Value::Null,
                handovers: Vec::new(),
            };
            let d = std::mem::replace(d, placeholder);
            let decided = self
                .awaiting
                .lock()
                .expect("awaiting lock")
                .insert(d, route, parts, now);
            if let Some(w) = decided {
                self.decided(w);
            }
        }
    }

    /// Drops what this process awaited for `uid`: the queue decided it.
    fn forget(&self, uid: &MessageUid) {
        self.awaiting.lock().expect("awaiting lock").remove(uid);
    }

    /// Records `route`'s outcome on the message and says what comes next: an RCS that
    /// failed falls back to SM or LM when its request asks for it.
    pub(crate) fn next(&self, d: &mut Delivery, route: Route, outcome: CarrierOutcome) -> Next {
        let delivered = outcome == CarrierOutcome::Delivered;
        match route {
            Route::Rcs => {
                d.m.rcs_status = Some(if delivered {
                    RcsStatus::Success
                } else {
                    RcsStatus::Fail
                });
                if !delivered && d.request["fall_back_yn"].as_bool().unwrap_or(false) {
                    return Next::HandOver(match d.request["fall_back_message_type"].as_str() {
                        Some("LM") => Route::FallbackLm,
                        _ => Route::FallbackSm,
                    });
                }
            }
            Route::FallbackSm | Route::FallbackLm => {
                d.m.fallback_status = Some(if delivered {
                    FallbackStatus::Success
                } else {
                    FallbackStatus::Fail
                });
                d.m.sms_status_code = Some(outcome.code());
            }
            Route::Xms => d.m.sms_status_code = Some(outcome.code()),
        }
        Next::Finish(outcome)
    }

    /// Records the message's final state: the outcome of its last attempt.
    pub(crate) fn finish(&self, d: Delivery, last: CarrierOutcome) {
        let Delivery {
            mut m, handovers, ..
        } = d;
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
        metrics::counter!(crate::metrics::FINISHED, "status" => status.as_str()).increment(1);
        self.activity.record(
            "message.finished",
            &object_ids(&m),
            json!({ "status": status.as_str(), "error": m.error_message }),
        );
        self.writer.finish(m, handovers);
    }
}

/// Where a hand-over left the message.
enum Step {
    Decided(CarrierOutcome),
    /// Waits for a retry or for its receipts.
    Waits,
}

pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
