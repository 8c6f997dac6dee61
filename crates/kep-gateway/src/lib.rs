//! The inference gateway, the data plane of model serving: `/endpoints/{endpoint}/{path…}`
//! with the endpoint's API key, a weighted choice of deployment, round robin over its ready
//! instances, mirroring, and proxying over kept-alive connections (an HTTP/1.1 fast path
//! in front of hyper, [`h1`]). It learns endpoints from the control plane and ready
//! instances from the runtime, both through [`RouteUpdate`]s, and counts calls in its
//! [`meter::Meters`], which the monitor reads. It knows nothing of the management API.

mod body;
mod broadcast;
mod error;
mod forwarding;
mod h1;
mod headers;
mod http2;
pub mod meter;
mod pool;
mod route;
mod settings;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use kep_core::limits::Limiter;
use kep_core::listener::Front;
use kep_core::service::Context;
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use crate::meter::Meters;
use body::BodyLimits;
pub use error::{GatewayError, Shape};
use forwarding::call;
pub use h1::parsers;
use pool::{InstancePool, PoolSettings};
pub use route::EndpointRoute;
use route::{Instance, Route, Table};
pub use settings::GatewaySettings;

/// Kept-alive connections per instance beyond this many idle ones are closed.
const MAX_IDLE_PER_INSTANCE: usize = 1024;

/// A deployment of an endpoint, as routes and meters name it.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct DeploymentKey {
    pub endpoint: String,
    pub deployment: String,
}

/// What the control plane and the runtime tell the gateway.
#[derive(Debug)]
pub enum RouteUpdate {
    Endpoint(EndpointRoute),
    EndpointRemoved(String),
    Backends {
        key: DeploymentKey,
        ready: Vec<SocketAddr>,
    },
    /// Answered once every update sent before it is in effect.
    Applied(tokio::sync::oneshot::Sender<()>),
}

pub struct Gateway {
    table: ArcSwap<Table>,
    pools: PoolSettings,
    limits: BodyLimits,
    timeout: Duration,
    spool: PathBuf,
    meters: Arc<Meters>,
    /// Whether calls are counted (`gateway.metrics`).
    metered: bool,
    /// Whether plain calls take the fast path (`gateway.fast_path`).
    fast_path: bool,
    limiter: Limiter,
    /// Where mirrored calls run.
    mirrors: TaskTracker,
}

impl Gateway {
    /// The gateway, and the sender its routing updates go to. Its tasks (the routing
    /// updates, mirrored calls) run on the service's tracker.
    pub fn start(
        settings: &GatewaySettings,
        spool: PathBuf,
        ctx: &Context,
    ) -> (Arc<Gateway>, mpsc::UnboundedSender<RouteUpdate>) {
        let gateway = Arc::new(Gateway {
            table: ArcSwap::from_pointee(Table::default()),
            pools: PoolSettings {
                connect_timeout: Duration::from_secs(settings.connect_timeout_s),
                idle_timeout: Duration::from_secs(settings.pool_idle_timeout_s),
                max_idle: MAX_IDLE_PER_INSTANCE,
                workers: workers(),
            },
            limits: BodyLimits {
                max_body: settings.max_body_bytes,
                buffer: settings.body_buffer_bytes,
            },
            timeout: Duration::from_secs(settings.upstream_timeout_s),
            spool,
            meters: Arc::default(),
            metered: settings.metrics,
            fast_path: settings.fast_path,
            limiter: Limiter::new(&settings.limits),
            mirrors: ctx.tasks.clone(),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        ctx.spawn(Arc::clone(&gateway).route_updates(rx));
        (gateway, tx)
    }

    /// Keeps the table current: each update rebuilds the one endpoint it touches.
    async fn route_updates(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<RouteUpdate>) {
        let mut configs: HashMap<String, EndpointRoute> = HashMap::new();
        let mut ready: HashMap<DeploymentKey, Vec<SocketAddr>> = HashMap::new();
        // Kept across rebuilds, so a change elsewhere does not drop an instance's connections.
        let mut pools: HashMap<SocketAddr, Arc<InstancePool>> = HashMap::new();
        while let Some(update) = rx.recv().await {
            let endpoint = match update {
                RouteUpdate::Endpoint(config) => {
                    let name = config.name.clone();
                    let deployments: Vec<String> =
                        config.deployments.iter().map(|(d, _)| d.clone()).collect();
                    self.meters.retain(&name, Some(&deployments));
                    configs.insert(name.clone(), config);
                    name
                }
                RouteUpdate::EndpointRemoved(name) => {
                    configs.remove(&name);
                    ready.retain(|k, _| k.endpoint != name);
                    self.meters.retain(&name, None);
                    name
                }
                RouteUpdate::Backends { key, ready: addrs } => {
                    let name = key.endpoint.clone();
                    if addrs.is_empty() {
                        ready.remove(&key);
                    } else {
                        ready.insert(key, addrs);
                    }
                    name
                }
                RouteUpdate::Applied(done) => {
                    let _ = done.send(());
                    continue;
                }
            };
            let mut endpoints = self.table.load().endpoints.clone();
            match configs.get(&endpoint) {
                Some(config) => {
                    let route = Route::build(config, &self.meters, |deployment| {
                        let key = DeploymentKey {
                            endpoint: endpoint.clone(),
                            deployment: deployment.to_owned(),
                        };
                        let addrs = ready.get(&key).map(Vec::as_slice).unwrap_or_default();
                        addrs
                            .iter()
                            .map(|&addr| {
                                let pool = pools
                                    .entry(addr)
                                    .or_insert_with(|| InstancePool::new(addr, self.pools));
                                Instance::new(addr, Arc::clone(pool))
                            })
                            .collect()
                    });
                    endpoints.insert(endpoint, Arc::new(route));
                }
                None => {
                    endpoints.remove(&endpoint);
                }
            }
            self.table.store(Arc::new(Table::new(endpoints)));
            pools.retain(|addr, _| ready.values().any(|a| a.contains(addr)));
        }
    }

    /// The gateway listener's router and its HTTP/1.1 fast path.
    pub fn app(self: &Arc<Self>) -> kep_core::listener::App {
        kep_core::listener::App {
            router: axum::Router::new()
                .fallback(call)
                .with_state(Arc::clone(self)),
            front: self
                .fast_path
                .then(|| Arc::new(h1::GatewayFront(Arc::clone(self))) as Arc<dyn Front>),
            workers: self.pools.workers,
            // The platform's to set: every listener alike.
            tls: None,
            unrouted: kep_core::listener::operator_shape,
            // A batch of images over gRPC is megabytes: in 16 KiB frames the gateway spent
            // half again the CPU time on a 19 MB call.
            http2_max_frame_bytes: Some(http2::MAX_FRAME_BYTES),
        }
    }

    pub fn meters(&self) -> Arc<Meters> {
        Arc::clone(&self.meters)
    }
}

/// The gateway listener's worker threads: as many as the runtime has (one per core unless
/// `TOKIO_WORKER_THREADS` says otherwise).
fn workers() -> usize {
    tokio::runtime::Handle::current().metrics().num_workers()
}

#[cfg(test)]
mod tests;
