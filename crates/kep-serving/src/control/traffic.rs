//! Traffic and mirroring: how an endpoint's calls are shared among its deployments, and
//! the routes the gateway is told.

use std::collections::BTreeMap;

use super::Control;
use super::validate;
use crate::ServingError;
use crate::ids::{DeploymentName, EndpointName};
use crate::kinds::Protocol;
use crate::store::DeploymentRow;
use kep_api::serving::{Mirroring, Traffic, TrafficRequest};
use kep_gateway::{EndpointRoute, RouteUpdate};

impl Control {
    pub async fn set_traffic(
        &self,
        endpoint: &EndpointName,
        req: TrafficRequest,
    ) -> Result<Traffic, ServingError> {
        let _guard = self.change().await?;
        self.endpoint_row(endpoint).await?;
        let rows = self.store.deployments(Some(endpoint)).await?;
        let names: Vec<String> = rows.iter().map(|d| d.name.to_string()).collect();
        if names.is_empty() {
            return Err(ServingError::Conflict(format!(
                "endpoint {endpoint} has no deployment to send traffic to"
            )));
        }
        let weights: BTreeMap<DeploymentName, u32> = validate::traffic_weights(&req, &names)?
            .into_iter()
            .map(|(name, w)| (DeploymentName::from(name), w))
            .collect();
        self.store.set_weights(endpoint, &weights).await?;
        self.publish_route(endpoint).await?;
        let detail = serde_json::to_value(&weights).unwrap_or_default();
        self.record("endpoint.traffic_set", &[endpoint], detail);
        Ok(traffic_view(&self.store.deployments(Some(endpoint)).await?))
    }

    pub async fn set_mirroring(
        &self,
        endpoint: &EndpointName,
        req: Mirroring,
    ) -> Result<Mirroring, ServingError> {
        let _guard = self.change().await?;
        self.endpoint_row(endpoint).await?;
        let responder = req.responder.map(DeploymentName::from);
        if req.enabled {
            let Some(responder) = &responder else {
                return Err(ServingError::field(
                    "responder",
                    "with mirroring on, name the deployment that answers",
                ));
            };
            let rows = self.store.deployments(Some(endpoint)).await?;
            if !rows.iter().any(|d| &d.name == responder) {
                return Err(ServingError::field(
                    "responder",
                    format!("endpoint {endpoint} has no deployment {responder}"),
                ));
            }
        }
        let responder = responder.filter(|_| req.enabled);
        self.store
            .set_mirroring(endpoint, req.enabled, responder.as_ref())
            .await?;
        self.publish_route(endpoint).await?;
        let detail = serde_json::json!({ "enabled": req.enabled, "responder": responder });
        self.record("endpoint.mirroring_set", &[endpoint], detail);
        Ok(Mirroring {
            enabled: req.enabled,
            responder: responder.map(DeploymentName::into_string),
        })
    }

    /// Tells every node's gateway how the endpoint routes now.
    pub(super) async fn publish_route(&self, name: &EndpointName) -> Result<(), ServingError> {
        self.route_endpoint(name).await?;
        self.share_route(name).await;
        Ok(())
    }

    /// Tells this node's gateway how the endpoint routes now.
    pub(super) async fn route_endpoint(&self, name: &EndpointName) -> Result<(), ServingError> {
        let row = self.endpoint_row(name).await?;
        let deployments = self.store.deployments(Some(name)).await?;
        let mut key_hash = [0u8; 32];
        hex::decode_to_slice(&row.key_hash, &mut key_hash)
            .map_err(|e| ServingError::Internal(e.into()))?;
        self.update_routes(RouteUpdate::Endpoint(EndpointRoute {
            name: row.name.to_string(),
            key_hash,
            http2: row.protocol == Protocol::Grpc,
            deployments: effective_weights(&deployments)
                .map(|(name, w)| (name.to_string(), w))
                .collect(),
            responder: (row.responder.as_ref())
                .filter(|_| row.mirroring)
                .map(DeploymentName::to_string),
        }))
        .await;
        Ok(())
    }

    /// Hands the gateway an update and waits until it is in effect, so that a key or a
    /// split the API has answered for is the one the next call meets.
    pub(super) async fn update_routes(&self, update: RouteUpdate) {
        let (done, applied) = tokio::sync::oneshot::channel();
        if self.routes.send(update).is_ok() && self.routes.send(RouteUpdate::Applied(done)).is_ok()
        {
            let _ = applied.await;
        }
    }
}

/// Weights as calls follow them: when every weight is 0 (the weighted deployment was
/// deleted), the deployments share equally.
fn effective_weights(rows: &[DeploymentRow]) -> impl Iterator<Item = (&DeploymentName, u32)> {
    let unweighted = rows.iter().all(|d| d.weight == 0);
    rows.iter().map(move |d| {
        let w = if unweighted { 1 } else { d.weight as u32 };
        (&d.name, w)
    })
}

pub(super) fn traffic_view(rows: &[DeploymentRow]) -> Traffic {
    let weights: BTreeMap<String, u32> = rows
        .iter()
        .map(|d| (d.name.to_string(), d.weight as u32))
        .collect();
    let effective: BTreeMap<String, u32> = effective_weights(rows)
        .map(|(name, w)| (name.to_string(), w))
        .collect();
    Traffic {
        weights,
        percent: validate::percentages(&effective),
    }
}
