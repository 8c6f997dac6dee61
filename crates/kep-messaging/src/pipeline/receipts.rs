//! Delivery receipts: each answers one submitted part of an acknowledged hand-over, by the
//! id the carrier gave it; once every part of a hand-over has its receipt, the worst of
//! them is the hand-over's outcome and the message goes on (a fallback, or its final
//! state).
//!
//! A receipt answers a part by the carrier's id of it within an account: an SMPP carrier's
//! SMSC account (host, port, `system_id`), which may deliver it on any session of the
//! account, another bind or another carrier bound to it, on this node or another; an HTTP
//! carrier's own dlr-url.
//!
//! Where this process is the only node, it matches receipts in memory first ([`Awaiting`]):
//! no query per receipt. A carrier that receipts at once often has its receipt read before
//! the task that handed the message over has registered it, so a receipt memory does not
//! know is held a moment ([`HOLD`]) for its hand-over. Every hand-over is also in the store
//! (`carrier_receipts`), so a receipt that memory still does not know — one for a hand-over
//! made before a restart, or by another node — is matched there. One that neither knows may
//! have overtaken its hand-over's record: it is looked for again for a few seconds, then
//! logged and dropped.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::carriers::CarrierOutcome;
use crate::carriers::{CarrierReceipt, MessageState, receipt_outcome};
use crate::ids::MessageUid;
use crate::kinds::{Route, Status};
use crate::pipeline::{Carrier, Delivery, Dispatcher};
use crate::store::{Handover, ReceiptRow};

/// How often, and how long apart, a receipt nothing knows yet is looked for again.
const LOOKUPS: u32 = 25;
const LOOKUP_EVERY: Duration = Duration::from_millis(200);
/// How long a receipt memory does not know waits there for its hand-over before the store
/// is asked.
const HOLD: Duration = Duration::from_secs(1);

/// The submitted parts of one hand-over: the carrier's ids of them, within the account
/// whose receipts answer them ([`crate::carriers::Submitted::Receipts`]).
pub(crate) struct Parts {
    /// The carrier it was handed to, for its record.
    pub carrier: Arc<str>,
    pub account: Arc<str>,
    pub ids: Vec<String>,
}

/// A part as a receipt names it: its account, and the carrier's id of it.
type PartKey = (Arc<str>, String);

/// A hand-over whose receipts this process awaits.
pub(crate) struct Waiting {
    d: Delivery,
    route: Route,
    parts: Parts,
    left: usize,
    /// The worst outcome of the parts' receipts so far.
    worst: CarrierOutcome,
    at: i64,
}

/// The hand-overs this process awaits receipts for, by message and by part.
#[derive(Default)]
pub(crate) struct Awaiting {
    by_part: HashMap<PartKey, MessageUid>,
    by_uid: HashMap<MessageUid, Waiting>,
    /// Receipts that came before their hand-over was registered, since when.
    held: HashMap<PartKey, (CarrierReceipt, CarrierOutcome, Instant)>,
}

/// What a receipt meant to [`Awaiting`].
enum Matched {
    Unknown,
    /// Other parts' receipts are still to come.
    Partly,
    /// The last part's: the hand-over is decided.
    Decided(Box<Waiting>),
}

impl Awaiting {
    /// Registers a hand-over; receipts held for its parts count at once: the hand-over,
    /// when they decided it.
    pub fn insert(
        &mut self,
        d: Delivery,
        route: Route,
        parts: Parts,
        at: i64,
    ) -> Option<Box<Waiting>> {
        let uid = d.m.uid.clone();
        let keys: Vec<PartKey> = parts
            .ids
            .iter()
            .map(|id| (Arc::clone(&parts.account), id.clone()))
            .collect();
        for key in &keys {
            self.by_part.insert(key.clone(), uid.clone());
        }
        let held: Vec<(PartKey, CarrierOutcome)> = keys
            .into_iter()
            .filter_map(|key| {
                let (_, outcome, _) = self.held.remove(&key)?;
                Some((key, outcome))
            })
            .collect();
        let left = parts.ids.len();
        self.by_uid.insert(
            uid,
            Waiting {
                d,
                route,
                parts,
                left,
                worst: CarrierOutcome::Delivered,
                at,
            },
        );
        let mut decided = None;
        for (key, outcome) in held {
            if let Matched::Decided(w) = self.receipt(&key, outcome) {
                decided = Some(w);
            }
        }
        decided
    }

    fn hold(&mut self, r: CarrierReceipt, outcome: CarrierOutcome) {
        let key = (Arc::clone(&r.account), r.message_id.clone());
        self.held.insert(key, (r, outcome, Instant::now()));
    }

    /// The receipts held since before `before`: no hand-over of this process claimed them.
    fn release_held(&mut self, before: Instant) -> Vec<CarrierReceipt> {
        let old: Vec<PartKey> = self
            .held
            .iter()
            .filter(|(_, (_, _, since))| *since < before)
            .map(|(key, _)| key.clone())
            .collect();
        old.into_iter()
            .filter_map(|key| self.held.remove(&key).map(|(r, _, _)| r))
            .collect()
    }

    pub fn remove(&mut self, uid: &MessageUid) -> Option<Waiting> {
        let w = self.by_uid.remove(uid)?;
        for id in &w.parts.ids {
            self.by_part
                .remove(&(Arc::clone(&w.parts.account), id.clone()));
        }
        Some(w)
    }

    fn receipt(&mut self, key: &PartKey, outcome: CarrierOutcome) -> Matched {
        let Some(uid) = self.by_part.remove(key) else {
            return Matched::Unknown;
        };
        let Some(w) = self.by_uid.get_mut(&uid) else {
            return Matched::Unknown;
        };
        w.worst = w.worst.max(outcome);
        w.left -= 1;
        if w.left > 0 {
            return Matched::Partly;
        }
        match self.by_uid.remove(&uid) {
            Some(w) => Matched::Decided(Box::new(w)),
            None => Matched::Unknown,
        }
    }

    /// Drops the hand-overs made before `before_ms`: the queue decides them at their
    /// deadline ([`Dispatcher::resume`]).
    fn expire(&mut self, before_ms: i64) {
        let old: Vec<MessageUid> = self
            .by_uid
            .iter()
            .filter(|(_, w)| w.at < before_ms)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in old {
            self.remove(&uid);
        }
    }
}

/// What a receipt's stored state word means; a word kep does not know counts as UNKNOWN.
fn stored_outcome(state: &str) -> CarrierOutcome {
    MessageState::from_stat(state)
        .and_then(receipt_outcome)
        .unwrap_or(CarrierOutcome::Resendable)
}

/// A message's hand-overs to carriers that send receipts, as the store knows them.
pub(crate) struct Progress {
    /// The decided ones.
    pub handovers: Vec<Handover>,
    /// The latest one's route and outcome; `None` while its receipts are missing.
    pub last: Option<(Route, CarrierOutcome)>,
    /// When the latest one was handed over.
    pub submitted_at: i64,
}

/// `None` when the message was never handed to a carrier that sends receipts.
pub(crate) fn progress(parts: &[ReceiptRow]) -> Option<Progress> {
    let mut groups: Vec<(&ReceiptRow, Option<CarrierOutcome>)> = Vec::new();
    for p in parts {
        let outcome = p.state.as_deref().map(stored_outcome);
        match groups
            .iter_mut()
            .find(|(g, _)| (g.route, g.attempt) == (p.route, p.attempt))
        {
            Some((_, worst)) => {
                *worst = worst.zip(outcome).map(|(a, b)| a.max(b));
            }
            None => groups.push((p, outcome)),
        }
    }
    let (latest, last) = *groups.iter().max_by_key(|(g, _)| g.submitted_at)?;
    let handovers = groups
        .iter()
        .filter_map(|(g, outcome)| {
            Some(Handover {
                route: g.route,
                outcome: outcome.as_ref()?.code(),
                at: g.submitted_at,
                carrier: g.carrier.clone(),
            })
        })
        .collect();
    Some(Progress {
        handovers,
        last: last.map(|o| (latest.route, o)),
        submitted_at: latest.submitted_at,
    })
}

impl<C: Carrier> Dispatcher<C> {
    /// Takes the carriers' receipts until they end.
    pub async fn run_receipts(
        self: Arc<Self>,
        mut receipts: mpsc::UnboundedReceiver<CarrierReceipt>,
    ) {
        let mut release = tokio::time::interval(HOLD / 4);
        loop {
            tokio::select! {
                r = receipts.recv() => {
                    let Some(r) = r else { return };
                    metrics::counter!(
                        "kep_messaging_carrier_receipts_total",
                        "carrier" => r.carrier.to_string(),
                        "state" => r.state.stat()
                    )
                    .increment(1);
                    self.on_receipt(r, 0);
                }
                _ = release.tick() => {
                    let released = self
                        .awaiting
                        .lock()
                        .expect("awaiting lock")
                        .release_held(Instant::now() - HOLD);
                    for r in released {
                        let me = Arc::clone(&self);
                        self.deliveries.spawn(async move { me.receipt_from_store(r, 0).await });
                    }
                }
            }
        }
    }

    /// Forgets, now and then, the hand-overs whose receipts are long overdue.
    pub async fn sweep_receipts(self: Arc<Self>, every: Duration) {
        let timeout = crate::pipeline::ms(self.policy.receipt_timeout);
        loop {
            tokio::time::sleep(every).await;
            let now = self.clock.unix_ms();
            self.awaiting
                .lock()
                .expect("awaiting lock")
                .expire(now - timeout);
            // The store keeps a part twice its deadline: the queue has decided it by then.
            if let Err(e) = self.store.sweep_receipts(now - 2 * timeout).await {
                tracing::warn!(error = %e, "forgetting old hand-overs");
            }
        }
    }

    fn on_receipt(self: &Arc<Self>, r: CarrierReceipt, lookups: u32) {
        // ENROUTE and the like are not final: the final receipt follows.
        let Some(outcome) = receipt_outcome(r.state) else {
            return;
        };
        if self.match_in_memory(&r, outcome) {
            return;
        }
        if self.policy.receipts_in_memory && lookups == 0 {
            self.awaiting
                .lock()
                .expect("awaiting lock")
                .hold(r, outcome);
            return;
        }
        let me = Arc::clone(self);
        self.deliveries
            .spawn(async move { me.receipt_from_store(r, lookups).await });
    }

    /// Whether this process awaited the receipt's part (and took it).
    fn match_in_memory(self: &Arc<Self>, r: &CarrierReceipt, outcome: CarrierOutcome) -> bool {
        if !self.policy.receipts_in_memory {
            return false;
        }
        let key = (Arc::clone(&r.account), r.message_id.clone());
        let matched = self
            .awaiting
            .lock()
            .expect("awaiting lock")
            .receipt(&key, outcome);
        match matched {
            Matched::Unknown => false,
            Matched::Partly => true,
            Matched::Decided(w) => {
                self.decided(w);
                true
            }
        }
    }

    /// A hand-over its receipts decided goes on, in a task of its own.
    pub(crate) fn decided(self: &Arc<Self>, w: Box<Waiting>) {
        let Waiting {
            mut d,
            route,
            parts,
            worst,
            at,
            ..
        } = *w;
        d.handovers.push(Handover {
            route,
            outcome: worst.code(),
            at,
            carrier: parts.carrier.to_string(),
        });
        let me = Arc::clone(self);
        self.deliveries
            .spawn(async move { me.go_on(d, route, worst).await });
    }

    async fn receipt_from_store(self: Arc<Self>, r: CarrierReceipt, lookups: u32) {
        let now = self.clock.unix_ms();
        let parts = match self
            .store
            .record_receipt(&r.account, &r.message_id, r.state.stat(), now)
            .await
        {
            Ok(parts) => parts,
            Err(e) => {
                tracing::warn!(error = %e, carrier = %r.carrier, "recording a receipt");
                None
            }
        };
        let Some(parts) = parts else {
            if lookups < LOOKUPS {
                tokio::time::sleep(LOOKUP_EVERY).await;
                self.on_receipt(r, lookups + 1);
            } else {
                metrics::counter!("kep_messaging_carrier_receipts_unknown_total", "carrier" => r.carrier.to_string())
                    .increment(1);
                tracing::warn!(carrier = %r.carrier, account = %r.account, id = %r.message_id,
                    state = r.state.stat(), "a receipt for a message kep does not know: dropped");
            }
            return;
        };
        // A part the store knows was in memory before its record was written (the receipt
        // overtook both): memory, which counts the other parts, takes it.
        if let Some(outcome) = receipt_outcome(r.state)
            && self.match_in_memory(&r, outcome)
        {
            return;
        }
        // A repeated receipt, or other parts' receipts still to come.
        if parts.is_empty() || parts.iter().any(|p| p.state.is_none()) {
            return;
        }
        let uid = parts[0].uid.clone();
        let (m, all) = match tokio::try_join!(
            self.store.message_by_uid(&uid),
            self.store.receipts_of(&uid)
        ) {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "reading a receipted message");
                return;
            }
        };
        // Its client was deleted, or the queue already decided it.
        let Some(m) = m.filter(|m| m.status == Status::Accepted) else {
            return;
        };
        let Some(Progress {
            handovers,
            last: Some((route, outcome)),
            ..
        }) = progress(&all)
        else {
            return;
        };
        let mut d = Delivery::new(m);
        d.handovers = handovers;
        self.go_on(d, route, outcome).await;
    }
}
