//! One shape for every durable outbox of the platform (a DRM notification to an agent, an
//! alert to a webhook, and the next ones): an item is written down by its service before it
//! is queued here, so a stop loses none; each key's items go out one at a time, in order,
//! while keys never wait for each other; each item is tried again with the one
//! [`Backoff`] until it is delivered, is no longer wanted, or its attempts are spent.
//!
//! A key's worker lives only while the key has items: it ends when its queue is empty, so
//! a key per session or per endpoint costs nothing once its items are out.
//!
//! With several nodes, an item belongs to the node that wrote it: only that node sends it.
//! What a stopped or dead node left is adopted by the first node to look, at its start and,
//! on a cluster, every few seconds after.

use std::collections::HashMap;
use std::fmt::Display;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::retry::Backoff;
use crate::service::Context;

/// Where a service keeps an outbox's items, and how one is sent.
#[async_trait::async_trait]
pub trait Outbox: Send + Sync + 'static {
    /// What orders items: one key's items are sent one after another.
    type Key: Clone + Eq + Hash + Display + Send + Sync + 'static;
    /// An item's id in the store.
    type Id: Clone + Display + Send + Sync + 'static;
    type Item: Send + Sync;

    /// Makes `node` (`None`: a node on its own) the owner of the undelivered items that no
    /// node of `up` owns (a previous run left them, or a node that died), and returns them
    /// in the order they were written.
    async fn adopt(
        &self,
        node: Option<&str>,
        up: &[String],
    ) -> anyhow::Result<Vec<(Self::Key, Self::Id)>>;

    /// The item, with the attempts already made on it; `None` once it is no longer to be
    /// sent (delivered, given up, its owner gone or done).
    async fn load(&self, id: &Self::Id) -> anyhow::Result<Option<(Self::Item, u32)>>;

    /// Makes attempt number `attempt` (from 1) and records it; why it failed, if it did.
    async fn attempt(&self, id: &Self::Id, item: &Self::Item, attempt: u32) -> Result<(), String>;

    /// Records that the item will not be sent: its attempts are spent, or its key's queue
    /// was full.
    async fn give_up(&self, id: &Self::Id, attempts: u32, error: &str);
}

/// How hard an outbox tries.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// Attempts per item, the first included.
    pub attempts: u32,
    /// Waits between attempts.
    pub retry: Backoff,
    /// Items waiting per key; one more is given up at once.
    pub queue: usize,
}

/// Sends the items of an [`Outbox`]; cheap to clone.
pub struct Dispatcher<O: Outbox> {
    inner: Arc<Inner<O>>,
}

impl<O: Outbox> Clone for Dispatcher<O> {
    fn clone(&self) -> Self {
        Dispatcher {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Inner<O: Outbox> {
    outbox: O,
    policy: Policy,
    ctx: Context,
    /// The queue of each key that has a worker.
    workers: Mutex<HashMap<O::Key, mpsc::Sender<O::Id>>>,
}

impl<O: Outbox> Dispatcher<O> {
    /// Workers run on the service's task tracker and end when the platform stops.
    pub fn new(outbox: O, policy: Policy, ctx: &Context) -> Self {
        Dispatcher {
            inner: Arc::new(Inner {
                outbox,
                policy: Policy {
                    attempts: policy.attempts.max(1),
                    queue: policy.queue.max(1),
                    ..policy
                },
                ctx: ctx.clone(),
                workers: Mutex::default(),
            }),
        }
    }

    pub fn outbox(&self) -> &O {
        &self.inner.outbox
    }

    /// Queues what a previous run left undelivered; how many items. On a cluster it goes on
    /// adopting, every few seconds, what a node that died left.
    pub async fn resume(&self) -> anyhow::Result<usize> {
        let n = self.adopt().await?;
        if self.inner.ctx.cluster.node_id().is_some() {
            let me = self.clone();
            self.inner.ctx.spawn(async move {
                let every = std::time::Duration::from_millis(crate::cluster::DEAD_AFTER_MS as u64);
                let mut tick = tokio::time::interval(every);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    match me.adopt().await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(items = n, "adopted what a stopped node left"),
                        Err(e) => tracing::warn!(error = %e, "adopting what stopped nodes left"),
                    }
                }
            });
        }
        Ok(n)
    }

    /// Queues the items no node that is up sends; how many.
    async fn adopt(&self) -> anyhow::Result<usize> {
        let cluster = &self.inner.ctx.cluster;
        let up = cluster.nodes().await?;
        let items = self.inner.outbox.adopt(cluster.node_id(), &up).await?;
        let n = items.len();
        for (key, id) in items {
            self.queue(key, id).await;
        }
        Ok(n)
    }

    /// Queues an item its service has written down.
    pub async fn queue(&self, key: O::Key, id: O::Id) {
        let full = {
            let mut workers = self.inner.workers.lock().expect("workers lock");
            let tx = workers.entry(key.clone()).or_insert_with(|| {
                let (tx, rx) = mpsc::channel(self.inner.policy.queue);
                self.inner
                    .ctx
                    .spawn(Arc::clone(&self.inner).work(key.clone(), rx));
                tx
            });
            match tx.try_send(id.clone()) {
                Ok(()) => false,
                Err(mpsc::error::TrySendError::Full(_)) => true,
                // The worker was cut off by the platform's stop: the item stays written down
                // and is resumed at the next start.
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        };
        if full {
            let error = format!(
                "the queue of {} is full ({} items)",
                key, self.inner.policy.queue
            );
            tracing::warn!(%key, %id, "{error}");
            self.inner.outbox.give_up(&id, 0, &error).await;
        }
    }
}

impl<O: Outbox> Inner<O> {
    /// Sends `key`'s items in order, and ends when its queue is empty.
    async fn work(self: Arc<Self>, key: O::Key, mut rx: mpsc::Receiver<O::Id>) {
        loop {
            let id = match rx.try_recv() {
                Ok(id) => id,
                Err(_) => {
                    // `queue` sends under this lock: nothing arrives between this look and
                    // the removal, and the next item finds no worker and starts one.
                    let mut workers = self.workers.lock().expect("workers lock");
                    match rx.try_recv() {
                        Ok(id) => id,
                        Err(_) => {
                            workers.remove(&key);
                            return;
                        }
                    }
                }
            };
            self.deliver(&id).await;
        }
    }

    async fn deliver(&self, id: &O::Id) {
        let mut waits = self.policy.retry.waits();
        loop {
            let (item, made) = match self.outbox.load(id).await {
                Ok(Some(loaded)) => loaded,
                Ok(None) => return,
                Err(e) => {
                    tracing::error!(%id, error = %e, "reading an outbox item");
                    return;
                }
            };
            if made >= self.policy.attempts {
                // Spent before a stop cut off its last record.
                self.outbox
                    .give_up(id, made, "its attempts were spent")
                    .await;
                return;
            }
            let attempt = made + 1;
            match self.outbox.attempt(id, &item, attempt).await {
                Ok(()) => return,
                Err(error) if attempt >= self.policy.attempts => {
                    tracing::warn!(%id, attempts = attempt, %error, "not delivered; given up");
                    self.outbox.give_up(id, attempt, &error).await;
                    return;
                }
                Err(error) => {
                    tracing::debug!(%id, attempt, %error, "not delivered; trying again");
                    tokio::time::sleep(waits.next_wait()).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
