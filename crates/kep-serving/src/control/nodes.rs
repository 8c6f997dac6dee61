//! Several nodes (CONTRACT §5): the runtime runs on one node at a time, the one that leads
//! `serving` ([`Cluster::elect`], a PostgreSQL advisory lock). Any node takes management
//! calls; what they change in instances is carried to the leader, which reads the stored
//! deployment and applies it. Every node's gateway routes every endpoint: a change of an
//! endpoint's route is told to every node before the call answers, and the leader tells
//! every node which instances are ready. When the leader dies, the next one starts every
//! stored deployment again; the store, not the messages, is what it starts from.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kep_api::serving::Instance;
use kep_core::cluster::Cluster;
use kep_gateway::RouteUpdate;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::Control;
use crate::ServingError;
use crate::deployment::DeploymentSpec;
use crate::ids::{DeploymentKey, EndpointName};
use crate::kinds::DeploymentState;
use crate::store::EndpointRow;

/// The role whose leader runs the runtime.
const ROLE: &str = "serving";
/// To the leader: start or roll over a stored deployment's instances.
const APPLY: &str = "serving.apply";
/// To the leader: stop a deployment's instances.
const REMOVE: &str = "serving.remove";
/// To the leader: a deployment's state and instances.
const STATUS: &str = "serving.status";
/// To every node: an endpoint's route changed (or it is gone).
const ROUTE: &str = "serving.route";
/// From the leader to every node: one deployment's ready instances.
const BACKENDS: &str = "serving.backends";
/// To the leader, from a node that starts: every deployment's ready instances.
const ALL_BACKENDS: &str = "serving.backends.all";
/// From a new leader: what the last one said of instances holds no more.
const LED: &str = "serving.led";

/// A deployment's state and instances, as the node that runs them tells.
#[derive(Serialize, Deserialize)]
pub(super) struct Placed {
    pub state: String,
    pub instances: Vec<Instance>,
}

/// Where the runtime runs, seen from this node.
pub struct Placement {
    pub cluster: Cluster,
    /// Whether this node runs the runtime (always, on its own).
    pub leading: watch::Receiver<bool>,
    pub backends: Arc<Backends>,
}

impl Placement {
    pub fn new(cluster: Cluster, routes: mpsc::UnboundedSender<RouteUpdate>) -> Self {
        let backends = Arc::new(Backends {
            routes,
            cluster: cluster.clone(),
            ready: Mutex::default(),
        });
        backends.answer();
        Placement {
            leading: cluster.elect(ROLE),
            backends,
            cluster,
        }
    }
}

type Ready = HashMap<kep_gateway::DeploymentKey, Vec<SocketAddr>>;

/// The ready instances this node's gateway routes to: its own runtime's while it leads,
/// the leader's as told otherwise.
pub struct Backends {
    routes: mpsc::UnboundedSender<RouteUpdate>,
    cluster: Cluster,
    ready: Mutex<Ready>,
}

#[derive(Serialize, Deserialize)]
struct Backend {
    key: kep_gateway::DeploymentKey,
    ready: Vec<SocketAddr>,
}

impl Backends {
    fn set(&self, key: kep_gateway::DeploymentKey, ready: Vec<SocketAddr>) {
        let mut all = self.ready.lock().expect("backends lock");
        if ready.is_empty() {
            all.remove(&key);
        } else {
            all.insert(key.clone(), ready.clone());
        }
        let _ = self.routes.send(RouteUpdate::Backends { key, ready });
    }

    /// Takes every instance out of rotation: they were another leader's.
    fn clear(&self) {
        let keys: Vec<_> = self
            .ready
            .lock()
            .expect("backends lock")
            .keys()
            .cloned()
            .collect();
        for key in keys {
            self.set(key, Vec::new());
        }
    }

    /// Takes the leader's news of instances, each before the next: one deployment's ready
    /// instances ([`BACKENDS`]), a new leader ([`LED`]), and a starting node's question for
    /// all of them ([`ALL_BACKENDS`]).
    fn answer(self: &Arc<Self>) {
        let on = |topic: &str, answer: fn(&Backends, &str) -> Result<String, String>| {
            let backends = Arc::downgrade(self);
            self.cluster.handle(
                topic,
                Arc::new(move |body| {
                    let done = match backends.upgrade() {
                        Some(b) => answer(&b, &body),
                        None => Err("serving has stopped".to_owned()),
                    };
                    Box::pin(std::future::ready(done))
                }),
            );
        };
        on(BACKENDS, |b, body| {
            let news: Backend = serde_json::from_str(body).map_err(|e| e.to_string())?;
            b.set(news.key, news.ready);
            Ok(String::new())
        });
        on(LED, |b, _| {
            b.clear();
            Ok(String::new())
        });
        on(ALL_BACKENDS, |b, _| {
            let all: Vec<Backend> = (b.ready.lock().expect("backends lock"))
                .iter()
                .map(|(key, ready)| Backend {
                    key: key.clone(),
                    ready: ready.clone(),
                })
                .collect();
            Ok(serde_json::to_string(&all).expect("serialises"))
        });
    }

    /// Hands the runtime's updates to this node's gateway, then to every other node's (in
    /// order, not waiting for them: one that is down would hold every update up).
    pub async fn share(self: Arc<Self>, mut runtime: mpsc::UnboundedReceiver<RouteUpdate>) {
        while let Some(update) = runtime.recv().await {
            let RouteUpdate::Backends { key, ready } = update else {
                let _ = self.routes.send(update);
                continue;
            };
            let body = serde_json::to_string(&Backend {
                key: key.clone(),
                ready: ready.clone(),
            })
            .expect("serialises");
            self.set(key, ready);
            if let Err(e) = self.cluster.tell(BACKENDS, &body).await {
                tracing::warn!(error = %e, "telling the nodes of ready instances");
            }
        }
    }
}

/// How long the leader may take to answer what it does at once.
const ASK_WITHIN: Duration = Duration::from_secs(2);

/// How long the leader may take to stop a deployment's instances: drain, then grace.
fn stop_within(settings: &crate::settings::ServingSettings) -> Duration {
    Duration::from_millis(settings.termination_drain_ms)
        + Duration::from_secs(settings.termination_grace_s)
        + ASK_WITHIN
}

impl Control {
    fn leads(&self) -> bool {
        *self.placement.leading.borrow()
    }

    /// Asks the leader; `None` when there is none now, or it did not answer (logged): the
    /// next leader starts from the store.
    async fn ask_leader(
        &self,
        topic: &str,
        body: &impl Serialize,
        within: Duration,
    ) -> Option<String> {
        let body = serde_json::to_string(body).expect("serialises");
        let cluster = &self.placement.cluster;
        let leader = match cluster.leader(ROLE).await {
            Ok(Some(node)) => node,
            Ok(None) => {
                // At a cluster's start, or between a leader's death and the next one's
                // start: the next one starts from the store.
                tracing::info!(topic, "no node runs the serving runtime now");
                return None;
            }
            Err(e) => {
                tracing::warn!(topic, error = %e, "finding the serving runtime's node");
                return None;
            }
        };
        match cluster.call_within(&leader, topic, &body, within).await {
            Ok(reply) => Some(reply),
            Err(e) => {
                tracing::warn!(topic, error = %e, "asking the serving runtime's node");
                None
            }
        }
    }

    /// Starts the deployment's instances, or rolls them over, where the runtime runs.
    pub(super) async fn run_instances(
        &self,
        key: DeploymentKey,
        spec: &DeploymentSpec,
        e: &EndpointRow,
    ) {
        if self.leads() {
            let spec = self.localized(spec).await;
            self.runtime
                .apply(key, self.launch(&spec, e), e.instance_count as u32);
        } else {
            self.ask_leader(APPLY, &key, ASK_WITHIN).await;
        }
    }

    /// Stops the deployment's instances where the runtime runs; returns once they ended.
    pub(super) async fn stop_instances(&self, key: DeploymentKey) {
        if self.leads() {
            self.runtime.remove(key).await;
        } else {
            self.ask_leader(REMOVE, &key, stop_within(&self.settings))
                .await;
        }
    }

    /// The deployment's state and instances, from the node that runs them.
    pub(super) async fn placed(&self, key: DeploymentKey) -> Option<Placed> {
        if !self.leads() {
            let reply = self.ask_leader(STATUS, &key, ASK_WITHIN).await?;
            return serde_json::from_str(&reply).ok().flatten();
        }
        let status = self.runtime.status(key).await?;
        Some(Placed {
            state: status.state.as_str().to_owned(),
            instances: status.instances.iter().map(|i| i.view()).collect(),
        })
    }

    /// Tells every other node that the endpoint's route changed; each reads it from the
    /// store.
    pub(super) async fn share_route(&self, name: &EndpointName) {
        if let Err(e) = self.placement.cluster.broadcast(ROUTE, name.as_str()).await {
            tracing::warn!(endpoint = %name, error = %e, "telling the nodes of a route");
        }
    }

    /// This node's gateway routes the endpoint as stored, or not at all if it is gone.
    async fn route_here(&self, name: EndpointName) -> Result<(), ServingError> {
        match self.route_endpoint(&name).await {
            Err(ServingError::NotFound(_)) => {
                self.update_routes(RouteUpdate::EndpointRemoved(name.into_string()))
                    .await;
                Ok(())
            }
            done => done,
        }
    }

    /// Starts every stored deployment's instances (this node has taken the lead).
    async fn resume_instances(&self) -> Result<(), ServingError> {
        for e in self.store.endpoints().await? {
            for d in self.store.deployments(Some(&e.name)).await? {
                let spec = self.localized(&d.spec).await;
                self.runtime.resume(
                    DeploymentKey::new(&e.name, &d.name),
                    self.launch(&spec, &e),
                    e.instance_count as u32,
                );
            }
        }
        Ok(())
    }

    /// The leader's answer to [`APPLY`]: the stored deployment, started or rolled over.
    async fn apply_stored(&self, key: DeploymentKey) -> Result<(), ServingError> {
        let e = self.endpoint_row(&key.endpoint).await?;
        let d = self.deployment_row(&key.endpoint, &key.deployment).await?;
        let spec = self.localized(&d.spec).await;
        self.runtime
            .apply(key, self.launch(&spec, &e), e.instance_count as u32);
        Ok(())
    }

    /// Takes the calls other nodes make of this one, and follows this node's lead of the
    /// runtime until `shutdown`: taking the lead starts every stored deployment, losing it
    /// (the database unreachable) stops them, since another node now runs them.
    pub(crate) async fn serve_nodes(self: &Arc<Self>, shutdown: CancellationToken) {
        self.handle(APPLY, |c, body| async move {
            c.apply_stored(read(&body)?).await.map(|()| String::new())
        });
        self.handle(REMOVE, |c, body| async move {
            c.runtime.remove(read(&body)?).await;
            Ok(String::new())
        });
        self.handle(STATUS, |c, body| async move {
            let placed = c.placed(read(&body)?).await;
            Ok(serde_json::to_string(&placed).expect("serialises"))
        });
        self.handle(ROUTE, |c, body| async move {
            c.route_here(EndpointName::from(body))
                .await
                .map(|()| String::new())
        });
        if !self.leads()
            && let Some(all) = self.ask_leader(ALL_BACKENDS, &(), ASK_WITHIN).await
        {
            for b in serde_json::from_str::<Vec<Backend>>(&all).unwrap_or_default() {
                self.placement.backends.set(b.key, b.ready);
            }
        }
        let mut leading = self.placement.leading.clone();
        let control = Arc::clone(self);
        self.tasks.spawn(async move {
            let mut led = false;
            loop {
                let leads = *leading.borrow_and_update();
                if leads && !led {
                    control.take_lead().await;
                } else if led && !leads && !shutdown.is_cancelled() {
                    tracing::warn!("no longer leading serving: stopping its instances here");
                    for (key, _) in control.runtime.statuses().await {
                        control.runtime.remove(key).await;
                    }
                }
                led = leads;
                if leading.changed().await.is_err() {
                    return;
                }
            }
        });
    }

    async fn take_lead(&self) {
        self.placement.backends.clear();
        // Told before any instance starts, so that it comes before their news.
        if let Err(e) = self.placement.cluster.tell(LED, "").await {
            tracing::warn!(error = %e, "telling the nodes of the serving runtime's move");
        }
        if let Err(e) = self.resume_instances().await {
            tracing::error!(error = %e, "starting the stored deployments");
        }
    }

    fn handle<F, R>(self: &Arc<Self>, topic: &str, answer: F)
    where
        F: Fn(Arc<Control>, String) -> R + Send + Sync + 'static,
        R: Future<Output = Result<String, ServingError>> + Send + 'static,
    {
        let control = Arc::downgrade(self);
        let answer = Arc::new(answer);
        self.placement.cluster.handle(
            topic,
            Arc::new(move |body| {
                let (control, answer) = (control.upgrade(), answer.clone());
                Box::pin(async move {
                    let control = control.ok_or("serving has stopped")?;
                    answer(control, body).await.map_err(|e| e.to_string())
                })
            }),
        );
    }
}

fn read<T: serde::de::DeserializeOwned>(body: &str) -> Result<T, ServingError> {
    serde_json::from_str(body).map_err(|e| ServingError::Internal(e.into()))
}

/// The state a deployment shows when no node can tell.
pub(super) fn unplaced() -> String {
    DeploymentState::Progressing.as_str().to_owned()
}
