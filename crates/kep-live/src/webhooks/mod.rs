//! Server webhooks (CONTRACT §1): every change of a room of a service whose webhook is on
//! becomes an event in the vendor's names, written down in the store and then posted to
//! the service's URL, signed, at least once and in order per room ([`delivery`]).
//!
//! A room records its changes under its lock, in the order they happen; here they only
//! enter a queue, so that neither Room methods nor participants ever wait for the store or
//! the receiver. One writer takes them off in that order, writes them down in batches and
//! hands each to its room's delivery queue, keeping it in memory until it is out (the store
//! is read back only after a restart). How each attempt went is written down in batches
//! too, by the recorder.

use std::sync::Arc;

use dashmap::DashMap;
use kep_core::clock::Clock;
use kep_core::outbox::{Dispatcher, Policy};
use kep_core::service::Context;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::ids::{ParticipantId, RoomId, ServiceId};
use crate::store::{NewWebhookEvent, Store, WebhookEventRow, WebhookRow};

mod delivery;

use delivery::Deliveries;
pub use delivery::DeliveryPolicy;

/// Each service's webhook, by service id: read for every room change and every delivery,
/// so shared rather than copied.
type Hooks = DashMap<String, Arc<WebhookRow>>;

/// Events written down in one transaction, at most.
const BATCH: usize = 512;

/// The cluster's topic: a service's webhook changed (the body is its id).
const HOOK_CHANGED: &str = "live.webhook";

/// Tells the other nodes that a service's webhook changed, and waits until they read it.
async fn announce(cluster: &kep_core::cluster::Cluster, service_id: &str) {
    if let Err(e) = cluster.broadcast(HOOK_CHANGED, service_id).await {
        tracing::warn!(error = %e, "other nodes were not told of a webhook change");
    }
}

/// The webhooks of every service, and the queue of their events.
pub struct Webhooks {
    /// By service: what a room's change is checked against, without the store.
    hooks: Arc<Hooks>,
    store: Arc<dyn Store>,
    clock: Clock,
    cluster: kep_core::cluster::Cluster,
    events: mpsc::UnboundedSender<NewWebhookEvent>,
}

impl Webhooks {
    /// Loads the webhooks, queues what a previous run left undelivered and starts the
    /// writer.
    pub async fn start(
        store: Arc<dyn Store>,
        policy: DeliveryPolicy,
        ctx: &Context,
    ) -> anyhow::Result<Self> {
        let hooks = Arc::new(DashMap::new());
        for row in store.webhooks().await? {
            hooks.insert(row.service_id.as_str().to_owned(), Arc::new(row));
        }
        let (table, reader) = (Arc::downgrade(&hooks), Arc::clone(&store));
        ctx.cluster.handle(
            HOOK_CHANGED,
            Arc::new(move |service_id| {
                let (table, reader) = (table.clone(), Arc::clone(&reader));
                Box::pin(async move {
                    let row = reader.webhook(&ServiceId::from(service_id.clone())).await;
                    let (Some(hooks), Ok(row)) = (table.upgrade(), row) else {
                        return Err("the webhooks could not be read".to_owned());
                    };
                    match row {
                        Some(row) => hooks.insert(service_id, Arc::new(row)),
                        None => hooks.remove(&service_id).map(|(_, h)| h),
                    };
                    Ok(String::new())
                })
            }),
        );
        let unsent = Arc::new(DashMap::new());
        let (outcomes, recorded) = mpsc::unbounded_channel();
        // Not `ctx.spawn`, here and for the writer: at a stop, what is queued is still
        // written down.
        ctx.tasks.spawn(delivery::record(
            recorded,
            Arc::clone(&store),
            ctx.shutdown.clone(),
        ));
        let deliveries = Deliveries::new(
            Arc::clone(&store),
            Arc::clone(&hooks),
            Arc::clone(&unsent),
            outcomes,
            policy,
            ctx.clock.clone(),
            ctx.cluster.clone(),
        )?;
        let dispatcher = Dispatcher::new(deliveries, policy.outbox, ctx);
        let resumed = dispatcher.resume().await?;
        if resumed > 0 {
            tracing::info!(events = resumed, "resuming webhook deliveries");
        }
        let (events, queued) = mpsc::unbounded_channel();
        let writer = Writer {
            store: Arc::clone(&store),
            dispatcher,
            unsent,
            node: ctx.cluster.node_id().map(str::to_owned),
        };
        ctx.tasks.spawn(writer.run(queued, ctx.shutdown.clone()));
        Ok(Webhooks {
            hooks,
            store,
            clock: ctx.clock.clone(),
            cluster: ctx.cluster.clone(),
            events,
        })
    }

    pub fn get(&self, service_id: &str) -> Option<Arc<WebhookRow>> {
        self.hooks.get(service_id).map(|h| Arc::clone(&h))
    }

    /// Sets a service's webhook whole; the secret is kept unless `secret` is given (the
    /// first setting makes one).
    pub async fn put(
        &self,
        service_id: &ServiceId,
        url: String,
        enabled: bool,
        secret: Option<String>,
    ) -> sqlx::Result<WebhookRow> {
        let secret = secret
            .or_else(|| self.get(service_id.as_str()).map(|h| h.secret.clone()))
            .unwrap_or_else(kep_core::secret::new_secret);
        let row = WebhookRow {
            service_id: service_id.clone(),
            url,
            enabled,
            secret,
            disabled_reason: None,
        };
        self.store.put_webhook(&row, self.clock.unix_s()).await?;
        self.hooks
            .insert(service_id.as_str().to_owned(), Arc::new(row.clone()));
        announce(&self.cluster, service_id.as_str()).await;
        Ok(row)
    }

    /// The service's events, newest first.
    pub async fn deliveries(
        &self,
        service_id: &ServiceId,
        limit: i64,
    ) -> sqlx::Result<Vec<crate::store::WebhookEventRow>> {
        self.store.webhook_events(service_id, limit).await
    }

    /// A room's change, in the activity's words (`participant.joined`): an event for the
    /// service's webhook, if it has one on.
    pub fn room_changed(
        &self,
        service_id: &Arc<str>,
        room_id: &RoomId,
        change: &str,
        participant_id: Option<&ParticipantId>,
        detail: &Value,
    ) {
        if !self.hooks.get(&**service_id).is_some_and(|h| h.enabled) {
            return;
        }
        let Some((event, action)) = vendor_event(change) else {
            return;
        };
        let id = kep_core::secret::new_uuid();
        let at = self.clock.unix_ms();
        let mut body = Map::new();
        body.insert("id".into(), json!(id));
        body.insert("event".into(), json!(event));
        body.insert("serviceId".into(), json!(&**service_id));
        body.insert("roomId".into(), json!(room_id));
        if let Some(pid) = participant_id {
            body.insert("participantId".into(), json!(pid));
        }
        if let Some(sid) = detail.get("streamId") {
            body.insert("streamId".into(), sid.clone());
        }
        if let Some(action) = action {
            body.insert("action".into(), json!(action));
        }
        body.insert("at".into(), json!(at));
        let _ = self.events.send(NewWebhookEvent {
            seq: 0,
            id,
            service_id: Arc::clone(service_id),
            room_id: room_id.to_string(),
            event,
            body: Value::Object(body).to_string(),
            at,
        });
    }
}

const ROOM_OPENED: &str = "Room.OnRoomOpened";
const ROOM_CLOSED: &str = "Room.OnRoomClosed";

/// The vendor's event and action for a room change of the activity.
fn vendor_event(change: &str) -> Option<(&'static str, Option<&'static str>)> {
    const PARTICIPANT: &str = "Room.OnParticipantEvent";
    const STREAM: &str = "Room.OnStreamEvent";
    Some(match change {
        "room.opened" => (ROOM_OPENED, None),
        "room.closed" => (ROOM_CLOSED, None),
        "participant.joined" => (PARTICIPANT, Some("joined")),
        "participant.left" => (PARTICIPANT, Some("left")),
        "participant.kicked" => (PARTICIPANT, Some("kicked")),
        "stream.published" => (STREAM, Some("published")),
        "stream.unpublished" => (STREAM, Some("unpublished")),
        "stream.inactivated" => (STREAM, Some("inactivated")),
        _ => return None,
    })
}

/// A room's delivery queue: `<serviceId>/<roomId>`.
fn room_key(service_id: &str, room_id: &str) -> String {
    format!("{service_id}/{room_id}")
}

/// Takes the rooms' events off their queue in order, writes them down (numbered) in
/// batches and queues each for its room.
struct Writer {
    store: Arc<dyn Store>,
    dispatcher: Dispatcher<Deliveries>,
    /// The events written down and not yet out, by `seq`: what deliveries read.
    unsent: Arc<DashMap<i64, Arc<WebhookEventRow>>>,
    /// This node, which owns what it writes down.
    node: Option<String>,
}

impl Writer {
    /// At the platform's stop it writes down what is queued, and ends.
    async fn run(
        self,
        mut queued: mpsc::UnboundedReceiver<NewWebhookEvent>,
        shutdown: CancellationToken,
    ) {
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            let stopping = tokio::select! {
                n = queued.recv_many(&mut batch, BATCH) => {
                    if n == 0 {
                        return;
                    }
                    false
                }
                () = shutdown.cancelled() => {
                    while let Ok(e) = queued.try_recv() {
                        batch.push(e);
                    }
                    true
                }
            };
            self.whole_rooms_only(&mut batch).await;
            match self
                .store
                .insert_webhook_events(&mut batch, self.node.as_deref())
                .await
            {
                // Resumed at the next start.
                Ok(()) if stopping => return,
                Ok(()) => {
                    for e in batch.drain(..) {
                        let key = room_key(&e.service_id, &e.room_id);
                        let seq = e.seq;
                        self.unsent
                            .insert(seq, Arc::new(WebhookEventRow::pending(e)));
                        self.dispatcher.queue(key, seq).await;
                    }
                }
                Err(e) => {
                    tracing::error!(events = batch.len(), error = %e, "writing webhook events");
                    batch.clear();
                }
            }
            if stopping {
                return;
            }
        }
    }
}

impl Writer {
    /// With several nodes, each holds its own part of a room, which opens and closes on its
    /// own: a room's webhook hears it open with its first part and close with its last.
    async fn whole_rooms_only(&self, batch: &mut Vec<NewWebhookEvent>) {
        let Some(node) = &self.node else { return };
        let mut kept = Vec::with_capacity(batch.len());
        for e in batch.drain(..) {
            let open = match e.event {
                ROOM_OPENED => true,
                ROOM_CLOSED => false,
                _ => {
                    kept.push(e);
                    continue;
                }
            };
            match self
                .store
                .room_part(&e.service_id, &e.room_id, node, open)
                .await
            {
                Ok(false) => {} // another node's part of the room is open
                Ok(true) => kept.push(e),
                Err(err) => {
                    tracing::warn!(error = %err, room = %e.room_id, "a room part's change");
                    kept.push(e);
                }
            }
        }
        *batch = kept;
    }
}

/// The outbox policy of the webhook settings.
pub fn policy(attempts: u32, retry_ms: u64, queue: usize) -> Policy {
    Policy {
        attempts,
        retry: kep_core::retry::Backoff::from_first(std::time::Duration::from_millis(retry_ms)),
        queue,
    }
}
