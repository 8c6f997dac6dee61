//! Endpoints: a name, an API key and an instance configuration the deployments under it
//! share.

use super::traffic::traffic_view;
use super::{Control, rfc3339, validate};
use crate::ServingError;
use crate::ids::{DeploymentKey, DeploymentName, EndpointName};
use crate::store::{DeploymentRow, EndpointRow};
use kep_api::serving::{Endpoint, EndpointRequest, Mirroring};
use kep_gateway::RouteUpdate;
use serde_json::{Value, json};

impl Control {
    pub async fn create_endpoint(
        &self,
        mut req: EndpointRequest,
    ) -> Result<(Endpoint, String), ServingError> {
        let shape = validate::endpoint(&req, &self.settings)?;
        let api_key = kep_core::secret::given_or_new(req.api_key.take())
            .map_err(|why| ServingError::field("api_key", why))?;
        self.check_endpoint_fits(&shape.instance_type, i64::from(shape.instance_count))?;
        let row = EndpointRow {
            name: EndpointName::from(req.name),
            description: req.description,
            instance_type: shape.instance_type,
            instance_count: i64::from(shape.instance_count),
            protocol: shape.protocol,
            key_hash: kep_core::secret::sha256_hex(&api_key),
            mirroring: false,
            responder: None,
            created_at: self.now_unix(),
        };
        let _guard = self.change().await?;
        if !self.store.insert_endpoint(&row).await? {
            return Err(ServingError::Conflict(format!(
                "an endpoint named {} exists",
                row.name
            )));
        }
        self.publish_route(&row.name).await?;
        let detail =
            json!({ "instanceType": row.instance_type, "instanceCount": row.instance_count });
        self.record("endpoint.created", &[&row.name], detail);
        Ok((self.endpoint_view(&row, &[]), api_key))
    }

    pub(super) async fn endpoint_row(
        &self,
        name: &EndpointName,
    ) -> Result<EndpointRow, ServingError> {
        self.store
            .endpoint(name)
            .await?
            .ok_or_else(|| ServingError::NotFound(format!("no endpoint {name}")))
    }

    pub async fn endpoint(&self, name: &EndpointName) -> Result<Endpoint, ServingError> {
        let row = self.endpoint_row(name).await?;
        let deployments = self.store.deployments(Some(name)).await?;
        Ok(self.endpoint_view(&row, &deployments))
    }

    pub async fn endpoints(&self) -> Result<Vec<Endpoint>, ServingError> {
        let all = self.store.deployments(None).await?;
        Ok(self
            .store
            .endpoints()
            .await?
            .iter()
            .map(|e| {
                let ds: Vec<DeploymentRow> = all
                    .iter()
                    .filter(|d| d.endpoint == e.name)
                    .cloned()
                    .collect();
                self.endpoint_view(e, &ds)
            })
            .collect())
    }

    /// Stops every deployment's instances, then forgets the endpoint.
    pub async fn delete_endpoint(&self, name: &EndpointName) -> Result<(), ServingError> {
        let _guard = self.change().await?;
        self.endpoint_row(name).await?;
        let deployments = self.store.deployments(Some(name)).await?;
        // Stopped side by side: each waits out its drain and grace periods.
        futures_util::future::join_all(
            deployments
                .iter()
                .map(|d| self.stop_instances(DeploymentKey::new(name, &d.name))),
        )
        .await;
        self.store.delete_endpoint(name).await?;
        self.update_routes(RouteUpdate::EndpointRemoved(name.to_string()))
            .await;
        self.share_route(name).await;
        self.record("endpoint.deleted", &[name], Value::Null);
        Ok(())
    }

    /// A new API key; the old one stops working at once.
    pub async fn reissue_key(&self, name: &EndpointName) -> Result<String, ServingError> {
        let _guard = self.change().await?;
        self.endpoint_row(name).await?;
        let api_key = kep_core::secret::new_secret();
        self.store
            .set_key_hash(name, &kep_core::secret::sha256_hex(&api_key))
            .await?;
        self.publish_route(name).await?;
        self.record("endpoint.key_reissued", &[name], Value::Null);
        Ok(api_key)
    }

    fn endpoint_view(&self, row: &EndpointRow, deployments: &[DeploymentRow]) -> Endpoint {
        Endpoint {
            name: row.name.to_string(),
            description: row.description.clone(),
            url: format!("{}/endpoints/{}", self.gateway_url, row.name),
            instance_type: row.instance_type.clone(),
            instance_count: row.instance_count as u32,
            protocol: row.protocol.as_str().to_owned(),
            deployments: deployments.iter().map(|d| d.name.to_string()).collect(),
            traffic: traffic_view(deployments),
            mirroring: Mirroring {
                enabled: row.mirroring,
                responder: row.responder.as_ref().map(DeploymentName::to_string),
            },
            created_at: rfc3339(row.created_at),
        }
    }
}
