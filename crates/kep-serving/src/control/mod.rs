//! The control plane: every management call's rules, the store, and what it tells the
//! runtime (which instances to run) and the gateway (how to route an endpoint). One file
//! per resource; the rules a request meets on its own are in `validate`, the files a
//! deployment needs (scripts, model layouts, uploads' checks) in `artifacts`.

mod artifacts;
mod deployments;
mod endpoints;
mod images;
mod launch;
mod logs;
mod models;
mod nodes;
mod quota;
mod traffic;
pub(crate) mod validate;

use kep_core::activity::ServiceActivity;
use kep_core::service::{Context, Service};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

use kep_core::clock::Clock;
use tokio::sync::{Mutex, mpsc};
use tokio_util::task::TaskTracker;

use crate::ServingError;
use crate::runtime::RuntimeHandle;
use crate::settings::ServingSettings;
use crate::store::Store;
use kep_gateway::RouteUpdate;
use launch::ModelServer;
pub use nodes::Placement;

pub struct Control {
    settings: ServingSettings,
    store: Arc<dyn Store>,
    runtime: RuntimeHandle,
    /// Which node runs the runtime, and the instances this node's gateway routes to.
    placement: Placement,
    routes: mpsc::UnboundedSender<RouteUpdate>,
    root: PathBuf,
    gateway_url: String,
    /// What created and updated dates are read from.
    clock: Clock,
    model_server: ModelServer,
    /// The container engine that engine images are in, connected per call.
    engine: crate::engine::Engine,
    /// Changes are made one at a time, so names, model counts and quota hold across the
    /// check and the write: on this node, and (several nodes) across them ([`Control::change`]).
    changes: Mutex<()>,
    activity: ServiceActivity,
    tasks: TaskTracker,
    /// Models and scripts for every node (several nodes).
    files: kep_core::cluster::SharedFiles,
}

impl Control {
    /// Records a change the operator made (no secret: a key never is).
    fn record(&self, event: &str, ids: &[&dyn std::fmt::Display], detail: Value) {
        self.activity.record(event, ids, detail);
    }
}

/// A change's turn, held until dropped.
struct Change<'a> {
    _here: tokio::sync::MutexGuard<'a, ()>,
    _nodes: kep_core::cluster::ClusterLock,
}

fn rfc3339(unix: i64) -> String {
    jiff::Timestamp::from_second(unix).map_or_else(|_| unix.to_string(), |t| t.to_string())
}

impl Control {
    pub fn new(
        settings: ServingSettings,
        store: Arc<dyn Store>,
        runtime: RuntimeHandle,
        placement: Placement,
        routes: mpsc::UnboundedSender<RouteUpdate>,
        root: PathBuf,
        ctx: &Context,
    ) -> anyhow::Result<Self> {
        if !settings
            .instance_types
            .contains_key(&settings.default_instance_type)
        {
            anyhow::bail!(
                "serving.default_instance_type {:?} is not one of serving.instance_types",
                settings.default_instance_type
            );
        }
        kep_core::private::dir(&models::models_dir(&root))?;
        Ok(Control {
            model_server: ModelServer::new(&settings)?,
            engine: crate::engine::Engine::new(settings.container_socket.clone()),
            settings,
            store,
            runtime,
            placement,
            routes,
            root,
            gateway_url: ctx.public_url.clone(),
            clock: ctx.clock.clone(),
            changes: Mutex::new(()),
            activity: ctx.activity.of::<crate::ServingService>(),
            tasks: ctx.tasks.clone(),
            files: ctx.cluster.files(<crate::ServingService as Service>::NAME),
        })
    }

    /// At start: this node's routes for every endpoint. Instances start on the node that
    /// leads ([`Control::serve_nodes`]).
    pub async fn resume(&self) -> Result<(), ServingError> {
        for e in self.store.endpoints().await? {
            self.route_endpoint(&e.name).await?;
        }
        Ok(())
    }

    /// Waits for this change's turn: on this node, then among the nodes.
    async fn change(&self) -> Result<Change<'_>, ServingError> {
        let here = self.changes.lock().await;
        let nodes = (self.placement.cluster.lock("serving changes").await)
            .map_err(|e| ServingError::Internal(e.into()))?;
        Ok(Change {
            _here: here,
            _nodes: nodes,
        })
    }

    /// Seconds since the epoch, as created and updated dates are stored.
    fn now_unix(&self) -> i64 {
        self.clock.unix_s()
    }

    pub async fn stop(&self) {
        self.runtime.shutdown().await;
    }
}
