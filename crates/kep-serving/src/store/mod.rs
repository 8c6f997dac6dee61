//! The serving service's storage seam: images, models, endpoints, deployments, events and
//! alerts behind one [`Store`] interface, on SQLite or PostgreSQL ([`sql`]) without the
//! domain code knowing which. [`open`] is the one place that picks the backend.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kep_api::serving as api;
use kep_core::service::Context;
use kep_model_server::framework::SignatureDef;
use kep_model_server::model::TensorSpec;
use serde::{Deserialize, Serialize};

use crate::deployment::DeploymentSpec;
use crate::ids::{
    AlertId, DeploymentName, EndpointName, ImageId, ImageName, InstanceId, ModelId, ModelName,
};
use crate::kinds::{
    AlertStatus, Condition, DeploymentState, EventKind, ImageSource, InstanceState, Protocol,
};

mod sql;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ImageRow {
    pub id: ImageId,
    pub name: ImageName,
    /// The argv words, for an image run as a local process; `None` for an engine image.
    #[sqlx(json(nullable))]
    pub command: Option<Vec<String>>,
    /// An engine image's reference, the engine's id and size, and where it came from.
    pub reference: Option<String>,
    pub engine_id: Option<String>,
    pub size: Option<i64>,
    pub source: Option<ImageSource>,
    pub created_at: i64,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ModelRow {
    pub id: ModelId,
    pub name: ModelName,
    pub framework: String,
    pub path: String,
    pub size: i64,
    pub sha256: String,
    pub created_at: i64,
    /// Its inputs and outputs as read from the artifact.
    #[sqlx(json)]
    pub inputs: Vec<TensorSpec>,
    #[sqlx(json)]
    pub outputs: Vec<TensorSpec>,
    /// `onnx`, `graphdef`, `savedmodel` or `torchscript`; empty for a model stored before
    /// formats were kept.
    pub format: String,
    /// Every version the artifact has, ascending.
    #[sqlx(json)]
    pub versions: Vec<i64>,
    /// A SavedModel's signatures (its latest version's), `serving_default` first.
    #[sqlx(json(nullable))]
    pub signatures: Option<Vec<SignatureDef>>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EndpointRow {
    pub name: EndpointName,
    pub description: Option<String>,
    pub instance_type: String,
    pub instance_count: i64,
    pub protocol: Protocol,
    pub key_hash: String,
    pub mirroring: bool,
    pub responder: Option<DeploymentName>,
    pub created_at: i64,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeploymentRow {
    pub endpoint: EndpointName,
    pub name: DeploymentName,
    #[sqlx(json)]
    pub spec: DeploymentSpec,
    pub weight: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

/// An event as stored: its states are those of its kind ([`Change::states`]).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EventRow {
    pub id: i64,
    pub at_ms: i64,
    pub deployment: DeploymentName,
    pub instance: Option<InstanceId>,
    pub kind: EventKind,
    pub from_state: Option<String>,
    pub to_state: Option<String>,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AlertRow {
    pub id: AlertId,
    pub endpoint: EndpointName,
    pub deployment: Option<DeploymentName>,
    pub condition: Condition,
    pub text: String,
    pub webhook_url: String,
    pub status: AlertStatus,
    pub attempts: i64,
    pub error: Option<String>,
    pub at_ms: i64,
    pub sent_at_ms: Option<i64>,
}

/// An endpoint's alert settings as stored (`alert_settings.settings`): the store's own type, in
/// the JSON form of the API's, so that a change of the API is not a migration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertSettings {
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_url: Option<String>,
    #[serde(default)]
    pub conditions: BTreeMap<String, AlertCondition>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertCondition {
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
}

impl From<api::AlertSettings> for AlertSettings {
    fn from(s: api::AlertSettings) -> Self {
        let api::AlertSettings {
            enabled,
            webhook_url,
            conditions,
        } = s;
        let condition =
            |api::AlertCondition { enabled, threshold }| AlertCondition { enabled, threshold };
        AlertSettings {
            enabled,
            webhook_url,
            conditions: conditions
                .into_iter()
                .map(|(name, c)| (name, condition(c)))
                .collect(),
        }
    }
}

impl From<AlertSettings> for api::AlertSettings {
    fn from(s: AlertSettings) -> Self {
        let AlertSettings {
            enabled,
            webhook_url,
            conditions,
        } = s;
        let condition =
            |AlertCondition { enabled, threshold }| api::AlertCondition { enabled, threshold };
        api::AlertSettings {
            enabled,
            webhook_url,
            conditions: conditions
                .into_iter()
                .map(|(name, c)| (name, condition(c)))
                .collect(),
        }
    }
}

/// An alert raised, before it is queued.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAlert {
    pub endpoint: EndpointName,
    pub deployment: Option<DeploymentName>,
    pub condition: Condition,
    pub text: String,
}

/// A recorded transition, as the runtime reports it.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub at_ms: i64,
    pub endpoint: EndpointName,
    pub deployment: DeploymentName,
    pub change: Change,
}

/// What an event records.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// From none when the deployment is made.
    Deployment {
        from: Option<DeploymentState>,
        to: DeploymentState,
        /// Where kep's own start or stop caused it, not the deployment.
        lifecycle: Option<Lifecycle>,
    },
    Instance {
        instance: InstanceId,
        from: InstanceState,
        to: InstanceState,
        reason: Option<String>,
    },
    /// The instance became ready (`true`) or stopped being.
    Ready {
        instance: InstanceId,
        ready: bool,
        reason: Option<String>,
    },
    Restart {
        instance: InstanceId,
        reason: Option<String>,
    },
}

/// kep's own start and stop, as causes of a deployment's change of state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// kep started and brought the deployment's instances up again.
    Started,
    /// kep is stopping and stops the deployment's instances.
    Stopping,
}

impl Lifecycle {
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Started => "kep started",
            Lifecycle::Stopping => "kep is stopping",
        }
    }
}

/// How readiness reads in an event's states.
fn ready_word(ready: bool) -> &'static str {
    if ready { "ready" } else { "not ready" }
}

/// The event columns every backend stores a change in.
impl Change {
    pub fn kind(&self) -> EventKind {
        match self {
            Change::Deployment { .. } => EventKind::DeploymentState,
            Change::Instance { .. } => EventKind::InstanceState,
            Change::Ready { .. } => EventKind::Ready,
            Change::Restart { .. } => EventKind::Restart,
        }
    }

    pub fn instance(&self) -> Option<&InstanceId> {
        match self {
            Change::Deployment { .. } => None,
            Change::Instance { instance, .. }
            | Change::Ready { instance, .. }
            | Change::Restart { instance, .. } => Some(instance),
        }
    }

    /// The states it went from and to, in its kind's words.
    pub fn states(&self) -> (Option<&'static str>, Option<&'static str>) {
        match self {
            Change::Deployment { from, to, .. } => {
                (from.map(DeploymentState::as_str), Some(to.as_str()))
            }
            Change::Instance { from, to, .. } => (Some(from.as_str()), Some(to.as_str())),
            Change::Ready { ready, .. } => (Some(ready_word(!ready)), Some(ready_word(*ready))),
            Change::Restart { .. } => (None, None),
        }
    }

    pub fn reason(&self) -> Option<&str> {
        match self {
            Change::Deployment { lifecycle, .. } => lifecycle.map(Lifecycle::as_str),
            Change::Instance { reason, .. }
            | Change::Ready { reason, .. }
            | Change::Restart { reason, .. } => reason.as_deref(),
        }
    }
}

/// The images and models not deleted, by id: a deployment made from another can no longer
/// be edited.
#[derive(Debug)]
pub struct LiveSources {
    pub images: BTreeSet<ImageId>,
    pub models: BTreeSet<ModelId>,
}

#[async_trait::async_trait]
pub trait Store: Send + Sync {
    /// Registers an image; `Ok(false)` when one of that name exists.
    async fn insert_image(&self, row: &ImageRow) -> sqlx::Result<bool>;
    /// The images not deleted, by name.
    async fn images(&self) -> sqlx::Result<Vec<ImageRow>>;
    async fn image(&self, name: &ImageName) -> sqlx::Result<Option<ImageRow>>;
    /// Soft delete: deployments made from it keep running but can no longer be edited.
    /// `Ok(false)` for an unknown image.
    async fn delete_image(&self, name: &ImageName) -> sqlx::Result<bool>;

    /// Registers a model; `Ok(false)` when one of that name exists.
    async fn insert_model(&self, row: &ModelRow) -> sqlx::Result<bool>;
    /// The models not deleted, by name.
    async fn models(&self) -> sqlx::Result<Vec<ModelRow>>;
    async fn model(&self, name: &ModelName) -> sqlx::Result<Option<ModelRow>>;
    /// Soft delete; the file stays while a deployment may still serve it. `Ok(false)` for
    /// an unknown model.
    async fn delete_model(&self, name: &ModelName) -> sqlx::Result<bool>;
    async fn live_sources(&self) -> sqlx::Result<LiveSources>;

    /// Creates an endpoint; `Ok(false)` when one of that name exists.
    async fn insert_endpoint(&self, row: &EndpointRow) -> sqlx::Result<bool>;
    /// Every endpoint, by name.
    async fn endpoints(&self) -> sqlx::Result<Vec<EndpointRow>>;
    async fn endpoint(&self, name: &EndpointName) -> sqlx::Result<Option<EndpointRow>>;
    /// Deletes the endpoint with its deployments, alert settings and alerts; `Ok(false)`
    /// for an unknown one.
    async fn delete_endpoint(&self, name: &EndpointName) -> sqlx::Result<bool>;
    async fn set_key_hash(&self, endpoint: &EndpointName, hash: &str) -> sqlx::Result<()>;
    async fn set_mirroring(
        &self,
        endpoint: &EndpointName,
        enabled: bool,
        responder: Option<&DeploymentName>,
    ) -> sqlx::Result<()>;

    /// Adds a deployment after the endpoint's others.
    async fn insert_deployment(&self, row: &DeploymentRow) -> sqlx::Result<()>;
    /// An endpoint's deployments in creation order; every endpoint's when `None`.
    async fn deployments(
        &self,
        endpoint: Option<&EndpointName>,
    ) -> sqlx::Result<Vec<DeploymentRow>>;
    async fn deployment(
        &self,
        endpoint: &EndpointName,
        name: &DeploymentName,
    ) -> sqlx::Result<Option<DeploymentRow>>;
    async fn update_deployment(
        &self,
        endpoint: &EndpointName,
        name: &DeploymentName,
        spec: &DeploymentSpec,
        now: i64,
    ) -> sqlx::Result<()>;
    async fn delete_deployment(
        &self,
        endpoint: &EndpointName,
        name: &DeploymentName,
    ) -> sqlx::Result<()>;
    /// Sets these deployments' weights at once.
    async fn set_weights(
        &self,
        endpoint: &EndpointName,
        weights: &BTreeMap<DeploymentName, u32>,
    ) -> sqlx::Result<()>;

    async fn insert_event(&self, e: &NewEvent) -> sqlx::Result<()>;
    /// A deployment's last `limit` events, newest first.
    async fn events(
        &self,
        endpoint: &EndpointName,
        deployment: &DeploymentName,
        limit: i64,
    ) -> sqlx::Result<Vec<EventRow>>;

    async fn set_alert_settings(
        &self,
        endpoint: &EndpointName,
        settings: &AlertSettings,
    ) -> sqlx::Result<()>;
    /// Every endpoint's alert settings.
    async fn alert_settings(&self) -> sqlx::Result<Vec<(EndpointName, AlertSettings)>>;
    /// Records a raised alert as pending, sent by `node`; its id.
    async fn insert_alert(
        &self,
        a: &NewAlert,
        webhook_url: &str,
        at_ms: i64,
        node: Option<&str>,
    ) -> sqlx::Result<AlertId>;
    async fn alert(&self, id: AlertId) -> sqlx::Result<Option<AlertRow>>;
    /// An endpoint's last `limit` alerts, newest first.
    async fn alerts(&self, endpoint: &EndpointName, limit: i64) -> sqlx::Result<Vec<AlertRow>>;
    /// Alerts not yet sent nor given up on that no node of `up` sends, now `node`'s to send
    /// ([`kep_core::outbox::Outbox::adopt`]), oldest first.
    async fn adopt_alerts(
        &self,
        node: Option<&str>,
        up: &[String],
    ) -> sqlx::Result<Vec<(EndpointName, AlertId)>>;
    /// The outcome of a delivery attempt: `status` stays `pending` while retries remain.
    async fn alert_attempted(
        &self,
        id: AlertId,
        status: AlertStatus,
        attempts: i64,
        error: Option<&str>,
        sent_at_ms: Option<i64>,
    ) -> sqlx::Result<()>;
}

/// Opens the service's store on the backend of the settings (`serving.db` under the data
/// dir, or schema `kep_serving` of `database_url`), migrated.
pub async fn open(ctx: &Context) -> anyhow::Result<Arc<dyn Store>> {
    use kep_core::storage::Database;
    Ok(
        match ctx
            .database_on("serving", &sql::SQLITE, &sql::POSTGRES)
            .await?
        {
            Database::Sqlite(pool) => Arc::new(sql::SqliteStore::new(pool)),
            Database::Postgres(pool) => Arc::new(sql::PgStore::new(pool)),
        },
    )
}
