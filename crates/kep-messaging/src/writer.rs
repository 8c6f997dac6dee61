//! Group commit: every write of the message path (accepting a message, recording its
//! delivery) goes through one writer task, which commits whatever is queued in one
//! transaction. A send is answered only after the transaction that stored it committed.
//!
//! SQLite has one writer at a time; one transaction of a few hundred rows costs about what
//! a transaction of one does, so under load this turns per-request commits into a few
//! commits per millisecond.

use tokio::sync::{mpsc, oneshot};

use crate::store::{Inserted, MessageRow, Store};

/// One hand-over to the carrier, to be recorded with the message's outcome.
#[derive(Debug, Clone)]
pub struct Handover {
    pub route: String,
    pub outcome: String,
    pub at: i64,
}

enum Write {
    Insert(Box<MessageRow>, oneshot::Sender<sqlx::Result<Inserted>>),
    Finish(Box<MessageRow>, Vec<Handover>),
}

/// The handle the handlers and the dispatcher write through.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::UnboundedSender<Write>,
}

/// Most writes in one transaction.
const MAX_BATCH: usize = 1024;

impl Writer {
    pub fn start(store: Store) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(store, rx));
        Writer { tx }
    }

    /// Stores an accepted message (or finds the one its cid already names); returns once
    /// committed.
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
        let _ = self.tx.send(Write::Finish(Box::new(row), handovers));
    }
}

async fn run(store: Store, mut rx: mpsc::UnboundedReceiver<Write>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(w) => batch.push(w),
                Err(_) => break,
            }
        }
        commit(&store, &mut batch).await;
    }
}

async fn commit(store: &Store, batch: &mut Vec<Write>) {
    let result = async {
        let mut tx = store.begin().await?;
        // All the accepted messages in one statement (SQLite takes up to 32,766 values: 13
        // columns × MAX_BATCH fits), then all the finishes in two.
        let new: Vec<&MessageRow> = batch
            .iter()
            .filter_map(|w| match w {
                Write::Insert(row, _) => Some(&**row),
                Write::Finish(..) => None,
            })
            .collect();
        let inserted = if new.is_empty() {
            Default::default()
        } else {
            Store::insert_messages(&mut tx, &new).await?
        };
        let mut outcomes = Vec::with_capacity(batch.len());
        for w in batch.iter() {
            outcomes.push(match w {
                Write::Insert(row, _) if inserted.contains(&row.uid) => Some(Inserted::New),
                // Its cid was taken, by an earlier message or one earlier in this batch.
                Write::Insert(row, _) => Some(Inserted::Existing(Box::new(
                    Store::message_by_cid(&mut tx, &row.client_id, &row.cid).await?,
                ))),
                Write::Finish(..) => None,
            });
        }
        let finished: Vec<(&MessageRow, &[Handover])> = batch
            .iter()
            .filter_map(|w| match w {
                Write::Finish(row, handovers) => Some((&**row, handovers.as_slice())),
                Write::Insert(..) => None,
            })
            .collect();
        // 8 values a row: MAX_BATCH rows fit one statement.
        if !finished.is_empty() {
            Store::finish_all(&mut tx, &finished).await?;
        }
        tx.commit().await?;
        Ok::<_, sqlx::Error>(outcomes)
    }
    .await;
    match result {
        Ok(outcomes) => {
            for (w, outcome) in batch.drain(..).zip(outcomes) {
                if let (Write::Insert(_, done), Some(o)) = (w, outcome) {
                    let _ = done.send(Ok(o));
                }
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
