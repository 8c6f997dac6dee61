//! Group commit: every write of the message path (accepting a message, recording its
//! delivery) goes through one writer task, which commits whatever is queued in one
//! transaction. A send is answered only after the transaction that stored it committed.
//!
//! One transaction of a few hundred rows costs about what a transaction of one does, so under
//! load this turns per-request commits into a few commits per millisecond. SQLite has one
//! writer at a time, so its batches commit one after the other; PostgreSQL takes several at
//! once ([`Store::writers`]), so a batch gathers while others commit (its commit waits for
//! the WAL's flush).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::ids::MessageUid;
use crate::store::{Handed, Handover, Inserted, MessageRow, Store};

enum Write {
    Insert(Box<MessageRow>, oneshot::Sender<sqlx::Result<Inserted>>),
    Finish(Box<MessageRow>, Vec<Handover>),
    Handed(Box<Handed>),
}

/// The handle the handlers and the dispatcher write through.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::UnboundedSender<Write>,
    unwritten: Unwritten,
}

/// For each message, how many of its delivery's records are queued or committing: until
/// they are in, the store still shows it due, and a claim of it must not hand it over again.
type Unwritten = Arc<Mutex<HashMap<MessageUid, usize>>>;

/// How long an accepted message stays claimed by the node that accepted it.
#[derive(Clone, Copy)]
pub struct Claim(pub i64);

/// Most writes in one transaction; the SQLite store writes a batch's messages in single
/// statements, which this keeps under SQLite's 32,766 values (14 a message).
const MAX_BATCH: usize = 1024;

impl Writer {
    /// The writer task lives as long as its handles: it ends once the service and its
    /// deliveries have dropped theirs, after committing what they queued (a stop must not cut
    /// off a delivery's record, so the shutdown token does not end it). Each message it
    /// stores new goes to `accepted`, this node's dispatcher.
    pub fn start(
        store: Arc<dyn Store>,
        claim: Claim,
        accepted: mpsc::UnboundedSender<MessageRow>,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let unwritten = Unwritten::default();
        tokio::spawn(run(store, claim, accepted, rx, Arc::clone(&unwritten)));
        Writer { tx, unwritten }
    }

    /// Whether a record of `uid`'s delivery is still on its way to the store.
    pub fn is_unwritten(&self, uid: &MessageUid) -> bool {
        self.unwritten
            .lock()
            .expect("unwritten lock")
            .contains_key(uid)
    }

    fn queue(&self, uid: &MessageUid, write: Write) {
        *self
            .unwritten
            .lock()
            .expect("unwritten lock")
            .entry(uid.clone())
            .or_default() += 1;
        if self.tx.send(write).is_err() {
            written(&self.unwritten, uid);
        }
    }

    /// Stores an accepted message (or finds the one its cid already names), claimed for this
    /// node's dispatcher; returns once committed. The writer, not the caller, hands a new
    /// message to the dispatcher: a caller dropped while it waits (a client that hung up)
    /// must not leave a stored message to wait for its claim to run out.
    pub async fn insert(&self, row: MessageRow) -> sqlx::Result<Inserted> {
        let (done, wait) = oneshot::channel();
        self.tx
            .send(Write::Insert(Box::new(row), done))
            .map_err(|_| sqlx::Error::PoolClosed)?;
        wait.await.map_err(|_| sqlx::Error::PoolClosed)?
    }

    /// Records a message's final state and its hand-overs. Not waited for: if it is lost in
    /// a crash, the message's lease runs out and it is delivered again.
    pub fn finish(&self, row: MessageRow, handovers: Vec<Handover>) {
        let uid = row.uid.clone();
        self.queue(&uid, Write::Finish(Box::new(row), handovers));
    }

    /// Records a hand-over the carrier acknowledged, whose receipts are awaited. Not waited
    /// for either: if it is lost in a crash, the message's lease runs out and it is handed
    /// over again (at least once).
    pub fn handed(&self, handed: Handed) {
        let uid = handed.uid.clone();
        self.queue(&uid, Write::Handed(Box::new(handed)));
    }
}

/// One record of `uid`'s delivery is in the store, or lost with its batch.
fn written(unwritten: &Unwritten, uid: &MessageUid) {
    let mut unwritten = unwritten.lock().expect("unwritten lock");
    if let Some(n) = unwritten.get_mut(uid) {
        *n -= 1;
        if *n == 0 {
            unwritten.remove(uid);
        }
    }
}

async fn run(
    store: Arc<dyn Store>,
    claim: Claim,
    accepted: mpsc::UnboundedSender<MessageRow>,
    mut rx: mpsc::UnboundedReceiver<Write>,
    unwritten: Unwritten,
) {
    let writers = Arc::new(Semaphore::new(store.writers()));
    let mut committing = tokio::task::JoinSet::new();
    loop {
        // A batch starts once a writer is free, so what arrives meanwhile joins it.
        let permit = Arc::clone(&writers)
            .acquire_owned()
            .await
            .expect("the semaphore stays open");
        let Some(first) = rx.recv().await else {
            break;
        };
        let mut batch = Vec::with_capacity(MAX_BATCH);
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(w) => batch.push(w),
                Err(_) => break,
            }
        }
        let (store, accepted) = (Arc::clone(&store), accepted.clone());
        let unwritten = Arc::clone(&unwritten);
        committing.spawn(async move {
            let uids: Vec<MessageUid> = batch
                .iter()
                .filter_map(|w| match w {
                    Write::Finish(row, _) => Some(row.uid.clone()),
                    Write::Handed(h) => Some(h.uid.clone()),
                    Write::Insert(..) => None,
                })
                .collect();
            commit(&*store, claim, &accepted, &mut batch).await;
            for uid in &uids {
                written(&unwritten, uid);
            }
            drop(permit);
        });
        while committing.try_join_next().is_some() {}
    }
    committing.join_all().await;
}

async fn commit(
    store: &dyn Store,
    claim: Claim,
    accepted_to: &mpsc::UnboundedSender<MessageRow>,
    batch: &mut Vec<Write>,
) {
    // Rows in one order in every batch: transactions that insert the same cids at once take
    // their locks in the same order, and never deadlock.
    batch.sort_by(|a, b| match (a, b) {
        (Write::Insert(a, _), Write::Insert(b, _)) => {
            (&a.client_id, &a.cid).cmp(&(&b.client_id, &b.cid))
        }
        (Write::Insert(..), _) => std::cmp::Ordering::Less,
        (_, Write::Insert(..)) => std::cmp::Ordering::Greater,
        _ => std::cmp::Ordering::Equal,
    });
    let accepted: Vec<&MessageRow> = batch
        .iter()
        .filter_map(|w| match w {
            Write::Insert(row, _) => Some(&**row),
            _ => None,
        })
        .collect();
    let finished: Vec<(&MessageRow, &[Handover])> = batch
        .iter()
        .filter_map(|w| match w {
            Write::Finish(row, handovers) => Some((&**row, handovers.as_slice())),
            _ => None,
        })
        .collect();
    let handed: Vec<&Handed> = batch
        .iter()
        .filter_map(|w| match w {
            Write::Handed(h) => Some(&**h),
            _ => None,
        })
        .collect();
    let result = store.commit(&accepted, &finished, &handed, claim.0).await;
    match result {
        Ok(answers) => {
            let waiting = batch.drain(..).filter_map(|w| match w {
                Write::Insert(row, done) => Some((row, done)),
                _ => None,
            });
            for ((row, done), answer) in waiting.zip(answers) {
                if matches!(answer, Inserted::New) {
                    let _ = accepted_to.send(*row);
                }
                let _ = done.send(Ok(answer));
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, writes = batch.len(), "a group commit failed");
            for w in batch.drain(..) {
                if let Write::Insert(_, done) = w {
                    let _ = done.send(Err(sqlx::Error::Protocol(format!(
                        "group commit failed: {e}"
                    ))));
                }
            }
        }
    }
}
