//! Deployments: what runs under an endpoint, made from an image or a model, edited in
//! place (a change its instances see rolls them over) and deleted.

use std::collections::{BTreeMap, BTreeSet};

use super::artifacts::{check_model, forget_workdir};
use super::launch::check_model_instances;
use super::{Control, nodes, rfc3339, validate};
use crate::ServingError;
use crate::deployment::{DeploymentSpec, DeploymentType, EngineImageRef, ImageRef, ModelRef};
use crate::ids::{DeploymentKey, DeploymentName, EndpointName, ImageName, ModelName};
use crate::store::{DeploymentRow, LiveSources};
use kep_api::serving::{Deployment, DeploymentPatch, DeploymentRequest};

/// A custom image's port when the request gives none.
const DEFAULT_PORT: u16 = 8080;

impl Control {
    /// Checks the request, resolves the image and model it names, and writes the files its
    /// instances run from (a script, a model laid out for a real server).
    async fn resolve(&self, req: DeploymentRequest) -> Result<DeploymentSpec, ServingError> {
        validate::deployment(&req, &self.settings)?;
        // The validator let an image through for custom images only, a model for the rest.
        let image = match &req.image {
            Some(name) => {
                let row = self
                    .store
                    .image(&ImageName::from(name.as_str()))
                    .await?
                    .ok_or_else(|| {
                        ServingError::field("image", format!("no image named {name}"))
                    })?;
                // An engine image runs as a container of the image it is now, pinned by
                // its engine id; a command image as a process.
                let engine = match (&row.reference, &row.engine_id) {
                    (Some(reference), Some(id)) => {
                        // An engine that is not running is a 503 before anything is made;
                        // an image gone from its store is the instances' image-pull reason.
                        self.engine.inspect(id).await?;
                        Some(EngineImageRef {
                            reference: reference.clone(),
                            id: id.clone(),
                        })
                    }
                    _ => None,
                };
                Some(ImageRef {
                    command: row.command.unwrap_or_default(),
                    engine,
                    id: row.id,
                    name: row.name,
                })
            }
            None => None,
        };
        let mut native = None;
        let batch = validate::model_config(req.kind, req.model_config.as_ref())?;
        let model = match &req.model {
            Some(name) => {
                let row = self
                    .store
                    .model(&ModelName::from(name.as_str()))
                    .await?
                    .ok_or_else(|| {
                        ServingError::field("model", format!("no model named {name}"))
                    })?;
                validate::served_framework(req.kind, &row.framework)?;
                check_model_instances(&req.env)?;
                let policy = req.version_policy.clone().unwrap_or_default();
                policy
                    .check()
                    .map_err(|e| ServingError::field("version_policy", e))?;
                let inputs = (row.format == "torchscript").then(|| row.inputs.clone());
                match self.model_server.choice(&req.env)? {
                    Some(engine) => {
                        let file = self.model_file(&row.id).await?;
                        check_model(file, engine, policy, inputs.clone(), batch).await?
                    }
                    None if batch > 0 => {
                        return Err(ServingError::field(
                            "model_config",
                            "batching is kep's model server's: a native tritonserver reads its own config.pbtxt",
                        ));
                    }
                    None => native = Some(self.native_layout(req.kind, &row, &policy).await?),
                }
                Some(ModelRef {
                    id: row.id,
                    name: row.name,
                    framework: row.framework,
                    path: row.path,
                    inputs,
                })
            }
            None => None,
        };
        let script_path = match &req.script {
            Some(source) => Some(self.script_file(source).await?),
            None => None,
        };
        Ok(DeploymentSpec {
            description: req.description,
            kind: req.kind.into(),
            image,
            model,
            script: req.script,
            script_path,
            native,
            version_policy: req.version_policy,
            model_config: req.model_config,
            env: req.env,
            port: req.port.unwrap_or(DEFAULT_PORT),
            readiness: req.readiness.map(Into::into),
            liveness: req.liveness.map(Into::into),
        })
    }

    pub async fn create_deployment(
        &self,
        endpoint: &EndpointName,
        req: DeploymentRequest,
    ) -> Result<Deployment, ServingError> {
        let name = DeploymentName::from(req.name.as_str());
        let spec = self.resolve(req).await?;
        let _guard = self.change().await?;
        let e = self.endpoint_row(endpoint).await?;
        let existing = self.store.deployments(Some(endpoint)).await?;
        if existing.iter().any(|d| d.name == name) {
            return Err(ServingError::Conflict(format!(
                "endpoint {endpoint} has a deployment named {name}"
            )));
        }
        check_models(&existing, &spec)?;
        self.check_quota(&e).await?;
        let now = self.now_unix();
        let row = DeploymentRow {
            endpoint: endpoint.clone(),
            name: name.clone(),
            spec: spec.clone(),
            // A lone deployment gets all the traffic; a later one none until traffic is set.
            weight: if existing.is_empty() { 100 } else { 0 },
            created_at: now,
            updated_at: now,
        };
        self.store.insert_deployment(&row).await?;
        // Recorded before its instances start: their events follow it.
        let detail = serde_json::json!({ "type": spec.kind.as_str() });
        self.record("deployment.created", &[endpoint, &name], detail);
        self.run_instances(DeploymentKey::new(endpoint, &name), &spec, &e)
            .await;
        self.publish_route(endpoint).await?;
        drop(_guard);
        self.deployment(endpoint, &name).await
    }

    pub(super) async fn deployment_row(
        &self,
        endpoint: &EndpointName,
        name: &DeploymentName,
    ) -> Result<DeploymentRow, ServingError> {
        if let Some(row) = self.store.deployment(endpoint, name).await? {
            return Ok(row);
        }
        // Which of the two is missing.
        self.endpoint_row(endpoint).await?;
        Err(ServingError::NotFound(format!(
            "endpoint {endpoint} has no deployment {name}"
        )))
    }

    pub async fn deployment(
        &self,
        endpoint: &EndpointName,
        name: &DeploymentName,
    ) -> Result<Deployment, ServingError> {
        let row = self.deployment_row(endpoint, name).await?;
        let live = self.store.live_sources().await?;
        Ok(self.deployment_view(row, &live).await)
    }

    pub async fn deployments(
        &self,
        endpoint: &EndpointName,
    ) -> Result<Vec<Deployment>, ServingError> {
        self.endpoint_row(endpoint).await?;
        let live = self.store.live_sources().await?;
        let mut out = Vec::new();
        for row in self.store.deployments(Some(endpoint)).await? {
            out.push(self.deployment_view(row, &live).await);
        }
        Ok(out)
    }

    async fn deployment_view(&self, row: DeploymentRow, live: &LiveSources) -> Deployment {
        let spec = row.spec;
        let placed = self
            .placed(DeploymentKey::new(&row.endpoint, &row.name))
            .await;
        let source_deleted = spec.image.iter().any(|i| !live.images.contains(&i.id))
            || spec.model.iter().any(|m| !live.models.contains(&m.id));
        Deployment {
            endpoint: row.endpoint.into_string(),
            name: row.name.into_string(),
            description: spec.description,
            kind: spec.kind.into(),
            image: spec.image.map(|i| i.name.into_string()),
            model: spec.model.map(|m| m.name.into_string()),
            script: spec.script,
            version_policy: spec.version_policy,
            model_config: spec.model_config,
            env: spec.env,
            port: (spec.kind == DeploymentType::CustomImage).then_some(spec.port),
            readiness: spec.readiness.map(Into::into),
            liveness: spec.liveness.map(Into::into),
            weight: row.weight as u32,
            source_deleted,
            state: placed
                .as_ref()
                .map_or_else(nodes::unplaced, |p| p.state.clone()),
            instances: placed.map(|p| p.instances).unwrap_or_default(),
            created_at: rfc3339(row.created_at),
            updated_at: rfc3339(row.updated_at),
        }
    }

    /// Edits the editable fields; a change its instances see rolls them over.
    pub async fn patch_deployment(
        &self,
        endpoint: &EndpointName,
        name: &DeploymentName,
        patch: DeploymentPatch,
    ) -> Result<Deployment, ServingError> {
        let _guard = self.change().await?;
        let e = self.endpoint_row(endpoint).await?;
        let old = self.deployment_row(endpoint, name).await?.spec;
        let live = self.store.live_sources().await?;
        let gone = (old.image.as_ref())
            .filter(|i| !live.images.contains(&i.id))
            .map(|i| ("image", i.name.as_str()))
            .or_else(|| {
                (old.model.as_ref())
                    .filter(|m| !live.models.contains(&m.id))
                    .map(|m| ("model", m.name.as_str()))
            });
        if let Some((what, source)) = gone {
            return Err(ServingError::SourceDeleted(format!(
                "the {what} {source} of deployment {name} has been deleted: register it again and create a new deployment"
            )));
        }
        let mut new = self.resolve(edited(name, &old, patch)).await?;
        // An unchanged script keeps the file its instances run (a repository is not cloned
        // anew by an edit of something else).
        if new.script == old.script && new.script_path != old.script_path {
            if let Some(fresh) = new.script_path.take() {
                forget_workdir(&fresh).await;
            }
            new.script_path = old.script_path.clone();
        }
        // So does an unchanged model served natively.
        if let (Some(o), Some(n)) = (&old.native, &new.native)
            && old.model.as_ref().map(|m| &m.id) == new.model.as_ref().map(|m| &m.id)
            && old.version_policy == new.version_policy
        {
            forget_workdir(&n.dir).await;
            new.native = Some(o.clone());
        }
        // An unchanged image name keeps the command or engine image it was deployed with.
        if let (Some(o), Some(n)) = (&old.image, &mut new.image)
            && o.id == n.id
        {
            n.command = o.command.clone();
            n.engine = o.engine.clone();
        }
        let others: Vec<DeploymentRow> = self
            .store
            .deployments(Some(endpoint))
            .await?
            .into_iter()
            .filter(|d| d.name != *name)
            .collect();
        check_models(&others, &new)?;
        self.store
            .update_deployment(endpoint, name, &new, self.now_unix())
            .await?;
        if !old.same_launch(&new) {
            self.run_instances(DeploymentKey::new(endpoint, name), &new, &e)
                .await;
        }
        drop(_guard);
        let detail = serde_json::json!({ "rolledOver": !old.same_launch(&new) });
        self.record("deployment.updated", &[endpoint, name], detail);
        self.deployment(endpoint, name).await
    }

    pub async fn delete_deployment(
        &self,
        endpoint: &EndpointName,
        name: &DeploymentName,
    ) -> Result<(), ServingError> {
        let _guard = self.change().await?;
        let e = self.endpoint_row(endpoint).await?;
        self.deployment_row(endpoint, name).await?;
        if e.mirroring && e.responder.as_ref() == Some(name) {
            return Err(ServingError::Conflict(format!(
                "{name} answers the mirrored calls: turn mirroring off or choose another responder first"
            )));
        }
        self.store.delete_deployment(endpoint, name).await?;
        let rest = self.store.deployments(Some(endpoint)).await?;
        if let [only] = rest.as_slice() {
            self.store
                .set_weights(endpoint, &BTreeMap::from([(only.name.clone(), 100)]))
                .await?;
        }
        self.publish_route(endpoint).await?;
        self.stop_instances(DeploymentKey::new(endpoint, name))
            .await;
        self.record(
            "deployment.deleted",
            &[endpoint, name],
            serde_json::Value::Null,
        );
        Ok(())
    }
}

/// The request an edit makes of deployment `name`: the patch's fields over the stored ones.
fn edited(
    name: &DeploymentName,
    old: &DeploymentSpec,
    patch: DeploymentPatch,
) -> DeploymentRequest {
    DeploymentRequest {
        name: name.to_string(),
        description: patch.description.unwrap_or(old.description.clone()),
        kind: old.kind.into(),
        image: patch
            .image
            .or(old.image.as_ref().map(|i| i.name.to_string())),
        model: patch
            .model
            .or(old.model.as_ref().map(|m| m.name.to_string())),
        script: patch.script.unwrap_or(old.script.clone()),
        version_policy: patch.version_policy.or(old.version_policy.clone()),
        model_config: patch.model_config.unwrap_or(old.model_config.clone()),
        env: patch.env.unwrap_or(old.env.clone()),
        port: patch
            .port
            .or((old.kind == DeploymentType::CustomImage).then_some(old.port)),
        readiness: patch
            .readiness
            .unwrap_or(old.readiness.clone().map(Into::into)),
        liveness: patch
            .liveness
            .unwrap_or(old.liveness.clone().map(Into::into)),
    }
}

/// At most two models per endpoint, counting the one `spec` would bring.
fn check_models(others: &[DeploymentRow], spec: &DeploymentSpec) -> Result<(), ServingError> {
    let Some(model) = &spec.model else {
        return Ok(());
    };
    let mut ids: BTreeSet<_> = others
        .iter()
        .filter_map(|d| d.spec.model.as_ref().map(|m| &m.id))
        .collect();
    ids.insert(&model.id);
    if ids.len() > validate::MODELS_PER_ENDPOINT {
        return Err(ServingError::field(
            "model",
            format!(
                "an endpoint serves at most {} models",
                validate::MODELS_PER_ENDPOINT
            ),
        ));
    }
    Ok(())
}
