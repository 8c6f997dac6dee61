//! Several kep nodes on one PostgreSQL database (CONTRACT §5): who is up, and how a node
//! tells the others something or asks one of them, over PostgreSQL's `LISTEN`/`NOTIFY` (no
//! other broker).
//!
//! Every node registers in `kep_cluster.nodes` and beats every second; one not seen for
//! [`DEAD_AFTER_MS`] is down. Messages go over one channel, `kep_cluster`, as JSON: a *call*
//! names a topic, a body and the node it is for (or none: every node), and each node that
//! takes it answers with a *reply*. A service registers a handler per topic. With SQLite (one
//! node) a [`Cluster`] is [`Cluster::single`]: there is nobody to tell.

use std::collections::{HashMap, HashSet};
use std::str::FromStr as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub mod files;
mod leader;

pub use files::SharedFiles;
pub use leader::ClusterLock;

const CHANNEL: &str = "kep_cluster";
const BEAT: Duration = Duration::from_secs(1);
/// A node not seen for this long is down: its calls are not waited for.
pub const DEAD_AFTER_MS: i64 = 3_000;
/// How many nodes may share a database: each has a slot of its own.
pub const SLOTS: u16 = 100;
/// A node gone this long gives its slot up: longer than clocks are ever apart, so ids it
/// made are not made again by the node that takes the slot.
const SLOT_KEPT_MS: i64 = 600_000;
/// How long a call waits for its replies before it goes on without them.
const REPLY_WITHIN: Duration = Duration::from_secs(2);
/// `NOTIFY` takes payloads up to 8,000 bytes: a larger message is stored and named.
const MAX_PAYLOAD: usize = 7_900;
/// How long a stored message is kept for the nodes to read.
const STORED_FOR_MS: i64 = 60_000;

/// The id of a call nobody waits for ([`Cluster::tell`]): it gets no reply. Calls that
/// are waited for count from 1.
const TOLD: u64 = 0;

/// The database's clock in unix milliseconds: one clock for every node's beats.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// What a node does with a call of one topic: its reply's body, or why it could not. It is
/// called in the order calls arrive, so what it does before its future first waits is done
/// in that order.
pub type Handler = Arc<dyn Fn(String) -> BoxFuture<'static, Result<String, String>> + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("node {0} did not answer in time")]
    NoReply(String),
    #[error("node {node} could not: {reason}")]
    Refused { node: String, reason: String },
    #[error("the cluster's database: {0}")]
    Database(#[from] sqlx::Error),
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "lowercase")]
enum Message {
    Call {
        id: u64,
        from: String,
        /// None: every node but the caller.
        to: Option<String>,
        topic: String,
        body: String,
    },
    Reply {
        id: u64,
        from: String,
        to: String,
        result: Result<String, String>,
    },
    /// A message too large for `NOTIFY`, in `stored_messages`.
    Stored { id: i64 },
}

/// This node's part in the cluster, shared by every service of the node.
#[derive(Clone)]
pub struct Cluster(Option<Arc<Shared>>);

struct Shared {
    node_id: String,
    slot: u16,
    pool: PgPool,
    handlers: RwLock<HashMap<String, Handler>>,
    /// Calls waiting for replies, by id: the nodes still to answer and where to put them.
    waiting: Mutex<HashMap<u64, Waiting>>,
    next_id: AtomicU64,
    /// The pool files are streamed through: a long upload holds a connection of its own,
    /// never one the heartbeat needs.
    files: PgPool,
    /// The node's tasks and its shutdown, for what a service starts later (elections).
    tasks: TaskTracker,
    stop: CancellationToken,
}

/// Each node's reply to a call, by node.
pub type Replies = Vec<(String, Result<String, String>)>;

struct Waiting {
    from: HashSet<String>,
    replies: Replies,
    done: Option<oneshot::Sender<Replies>>,
}

impl Cluster {
    /// One node on its own (SQLite): every broadcast is done at once.
    pub fn single() -> Self {
        Cluster(None)
    }

    /// Joins the cluster of the database at `url`: registers this node, beats, and listens
    /// until `shutdown`, when it leaves (its row goes, so nobody waits for it).
    pub async fn join(
        url: &str,
        shutdown: CancellationToken,
        tasks: &TaskTracker,
    ) -> anyhow::Result<Self> {
        let options = PgConnectOptions::from_str(url)
            .context("database_url")?
            .options([("search_path", "kep_cluster")]);
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect_with(options.clone())
            .await
            .context("connecting to the database for the cluster")?;
        static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/cluster");
        crate::storage::make_schema(&mut *pool.acquire().await?, "kep_cluster").await?;
        MIGRATOR.run(&pool).await.context("migrating kep_cluster")?;
        let files = PgPoolOptions::new()
            .max_connections(4)
            .connect_lazy_with(options.clone());
        let node_id = crate::secret::new_uuid();
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.listen(CHANNEL).await?;
        let slot = register(&pool, &node_id).await?;
        let shared = Arc::new(Shared {
            node_id,
            slot,
            pool,
            handlers: RwLock::default(),
            waiting: Mutex::default(),
            next_id: AtomicU64::new(1),
            files,
            tasks: tasks.clone(),
            stop: shutdown.clone(),
        });
        tracing::info!(node = %shared.node_id, slot, "joined the cluster");
        let (beating, listening) = (shared.clone(), shared.clone());
        let stop = shutdown.clone();
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(BEAT);
            while stop.run_until_cancelled(tick.tick()).await.is_some() {
                if let Err(e) = beating.beat().await {
                    tracing::warn!(error = %e, "a cluster heartbeat failed");
                }
            }
            let _ = sqlx::query("DELETE FROM nodes WHERE node_id = $1")
                .bind(&beating.node_id)
                .execute(&beating.pool)
                .await;
        });
        tasks.spawn(async move {
            shutdown
                .run_until_cancelled(listening.listen(listener))
                .await;
        });
        Ok(Cluster(Some(shared)))
    }

    /// This node's id, where there are several.
    pub fn node_id(&self) -> Option<&str> {
        self.0.as_ref().map(|s| s.node_id.as_str())
    }

    /// This node's slot (0 to [`SLOTS`] - 1): no other node that is up, or was within ten
    /// minutes, has it. 0 for a node on its own.
    pub fn slot(&self) -> u16 {
        self.0.as_ref().map_or(0, |s| s.slot)
    }

    /// Calls of `topic` from other nodes go to `handler`.
    pub fn handle(&self, topic: &str, handler: Handler) {
        if let Some(s) = &self.0 {
            s.handlers
                .write()
                .expect("handlers lock")
                .insert(topic.to_owned(), handler);
        }
    }

    /// Tells every other node that is up, and returns once each has replied (or stopped
    /// answering, which is logged): what changed here has then taken effect everywhere.
    pub async fn broadcast(&self, topic: &str, body: &str) -> Result<(), CallError> {
        for (node, result) in self.gather(topic, body).await? {
            if let Err(reason) = result {
                tracing::warn!(%node, topic, reason, "a node could not take a change");
            }
        }
        Ok(())
    }

    /// Tells every other node without waiting for them: for news whose order matters more
    /// than its arrival (a node that is down would hold each message up).
    pub async fn tell(&self, topic: &str, body: &str) -> Result<(), CallError> {
        let Some(s) = &self.0 else {
            return Ok(());
        };
        s.notify(&Message::Call {
            id: TOLD,
            from: s.node_id.clone(),
            to: None,
            topic: topic.to_owned(),
            body: body.to_owned(),
        })
        .await
    }

    /// Asks every other node that is up; their replies, by node. A node that does not
    /// answer in time is logged and left out.
    pub async fn gather(&self, topic: &str, body: &str) -> Result<Replies, CallError> {
        let Some(s) = &self.0 else {
            return Ok(Vec::new());
        };
        let others = s.others().await?;
        if others.is_empty() {
            return Ok(Vec::new());
        }
        let replies = s
            .call(None, others.clone(), topic, body, REPLY_WITHIN)
            .await?;
        let answered: HashSet<&str> = replies.iter().map(|(n, _)| n.as_str()).collect();
        for node in others.iter().filter(|n| !answered.contains(n.as_str())) {
            tracing::warn!(%node, topic, "a node did not answer in time");
        }
        Ok(replies)
    }

    /// Asks `node` and waits for its reply.
    pub async fn call(&self, node: &str, topic: &str, body: &str) -> Result<String, CallError> {
        self.call_within(node, topic, body, REPLY_WITHIN).await
    }

    /// Asks `node` and waits up to `within` for its reply: for what takes the node longer.
    pub async fn call_within(
        &self,
        node: &str,
        topic: &str,
        body: &str,
        within: Duration,
    ) -> Result<String, CallError> {
        let Some(s) = &self.0 else {
            return Err(CallError::NoReply(node.to_owned()));
        };
        let replies = s
            .call(
                Some(node),
                HashSet::from([node.to_owned()]),
                topic,
                body,
                within,
            )
            .await?;
        match replies.into_iter().next() {
            Some((_, Ok(reply))) => Ok(reply),
            Some((node, Err(reason))) => Err(CallError::Refused { node, reason }),
            None => Err(CallError::NoReply(node.to_owned())),
        }
    }

    /// The nodes that are up, this one included.
    pub async fn nodes(&self) -> sqlx::Result<Vec<String>> {
        match &self.0 {
            None => Ok(Vec::new()),
            Some(s) => s.up().await,
        }
    }
}

/// Registers the node in the lowest free slot.
async fn register(pool: &PgPool, node_id: &str) -> anyhow::Result<u16> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('kep nodes'))")
        .execute(&mut *tx)
        .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DELETE FROM nodes WHERE seen_at < {NOW_MS} - $1"
    )))
    .bind(SLOT_KEPT_MS)
    .execute(&mut *tx)
    .await?;
    let taken: HashSet<i32> = sqlx::query_scalar("SELECT slot FROM nodes")
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
    let slot = (0..SLOTS)
        .find(|s| !taken.contains(&i32::from(*s)))
        .with_context(|| format!("{SLOTS} nodes already share this database"))?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO nodes (node_id, slot, started_at, seen_at) VALUES ($1, $2, {NOW_MS}, {NOW_MS})"
    )))
    .bind(node_id)
    .bind(i32::from(slot))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(slot)
}

impl Shared {
    async fn beat(&self) -> sqlx::Result<()> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM stored_messages WHERE at < {NOW_MS} - $1"
        )))
        .bind(STORED_FOR_MS)
        .execute(&self.pool)
        .await?;
        let done = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE nodes SET seen_at = {NOW_MS} WHERE node_id = $1"
        )))
        .bind(&self.node_id)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            tracing::error!(node = %self.node_id, "this node was gone so long that its slot was given up");
        }
        Ok(())
    }

    async fn up(&self) -> sqlx::Result<Vec<String>> {
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT node_id FROM nodes WHERE seen_at > {NOW_MS} - $1 ORDER BY started_at, node_id"
        )))
        .bind(DEAD_AFTER_MS)
        .fetch_all(&self.pool)
        .await
    }

    async fn others(&self) -> sqlx::Result<HashSet<String>> {
        Ok(self
            .up()
            .await?
            .into_iter()
            .filter(|n| *n != self.node_id)
            .collect())
    }

    async fn notify(&self, m: &Message) -> Result<(), CallError> {
        let mut payload = serde_json::to_string(m).expect("a message serialises");
        if payload.len() > MAX_PAYLOAD {
            let id: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "INSERT INTO stored_messages (payload, at) VALUES ($1, {NOW_MS}) RETURNING id"
            )))
            .bind(&payload)
            .fetch_one(&self.pool)
            .await?;
            payload = serde_json::to_string(&Message::Stored { id }).expect("serialises");
        }
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(payload)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn call(
        &self,
        to: Option<&str>,
        from: HashSet<String>,
        topic: &str,
        body: &str,
        within: Duration,
    ) -> Result<Replies, CallError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (done, replies) = oneshot::channel();
        self.waiting.lock().expect("waiting lock").insert(
            id,
            Waiting {
                from,
                replies: Vec::new(),
                done: Some(done),
            },
        );
        let sent = self
            .notify(&Message::Call {
                id,
                from: self.node_id.clone(),
                to: to.map(str::to_owned),
                topic: topic.to_owned(),
                body: body.to_owned(),
            })
            .await;
        if let Err(e) = sent {
            self.waiting.lock().expect("waiting lock").remove(&id);
            return Err(e);
        }
        let got = tokio::time::timeout(within, replies).await;
        let left = self.waiting.lock().expect("waiting lock").remove(&id);
        Ok(match got {
            Ok(Ok(all)) => all,
            // Timed out: whatever came in time.
            _ => left.map(|w| w.replies).unwrap_or_default(),
        })
    }

    async fn listen(self: Arc<Self>, mut listener: PgListener) {
        loop {
            let n = match listener.recv().await {
                Ok(n) => n,
                Err(e) => {
                    // sqlx reconnects on the next recv; what was sent meanwhile is lost,
                    // and its callers go on without the reply.
                    tracing::warn!(error = %e, "the cluster's listener lost its connection");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let message = match serde_json::from_str::<Message>(n.payload()) {
                Ok(Message::Stored { id }) => self.stored(id).await,
                read => read.map_err(|e| e.to_string()),
            };
            match message {
                Ok(Message::Call {
                    id,
                    from,
                    to,
                    topic,
                    body,
                }) if from != self.node_id && to.as_deref().is_none_or(|t| t == self.node_id) => {
                    let handler = self
                        .handlers
                        .read()
                        .expect("handlers lock")
                        .get(&topic)
                        .cloned();
                    let answer = handler.map(|h| h(body));
                    if id == TOLD {
                        if let Some(answer) = answer {
                            tokio::spawn(answer);
                        }
                        continue;
                    }
                    let me = self.clone();
                    tokio::spawn(async move {
                        let result = match answer {
                            Some(answer) => answer.await,
                            None => Err(format!("no handler for {topic}")),
                        };
                        let reply = Message::Reply {
                            id,
                            from: me.node_id.clone(),
                            to: from,
                            result,
                        };
                        if let Err(e) = me.notify(&reply).await {
                            tracing::warn!(error = %e, "a cluster reply was not sent");
                        }
                    });
                }
                Ok(Message::Reply {
                    id,
                    from,
                    to,
                    result,
                }) if to == self.node_id => self.replied(id, from, result),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "a cluster message kep cannot read"),
            }
        }
    }

    /// A message stored for being too large for `NOTIFY`.
    async fn stored(&self, id: i64) -> Result<Message, String> {
        let payload: String =
            sqlx::query_scalar("SELECT payload FROM stored_messages WHERE id = $1")
                .bind(id)
                .fetch_one(&self.pool)
                .await
                .map_err(|e| e.to_string())?;
        serde_json::from_str(&payload).map_err(|e| e.to_string())
    }

    fn replied(&self, id: u64, from: String, result: Result<String, String>) {
        let mut waiting = self.waiting.lock().expect("waiting lock");
        let Some(w) = waiting.get_mut(&id) else {
            return;
        };
        if w.from.remove(&from) {
            w.replies.push((from, result));
        }
        if w.from.is_empty()
            && let Some(done) = w.done.take()
        {
            let _ = done.send(std::mem::take(&mut w.replies));
        }
    }
}
