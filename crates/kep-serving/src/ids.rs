//! The serving service's typed ids: each name or id of a stored object is its own type, so
//! an endpoint's name can't be passed where a deployment's is wanted. Strings (numbers for
//! alerts) on the wire and in the database, unchanged.

kep_core::string_id!(EndpointName, "An endpoint's name, unique in the workspace.");
kep_core::string_id!(
    DeploymentName,
    "A deployment's name, unique in its endpoint."
);
kep_core::string_id!(
    ImageName,
    "An image's name, unique among the images not deleted."
);
kep_core::string_id!(
    ImageId,
    "An image's id (a UUID): what a deployment keeps of the image it was made from."
);
kep_core::string_id!(
    ModelName,
    "A model's name, unique among the models not deleted."
);
kep_core::string_id!(
    ModelId,
    "A model's id (a UUID): what a deployment keeps of the model it serves, and its file's name."
);
kep_core::string_id!(
    InstanceId,
    "An instance's id: its deployment's name and five random characters, as a pod's."
);

/// A raised alert's id, in the order alerts were raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, sqlx::Type)]
#[sqlx(transparent)]
pub struct AlertId(pub i64);

impl std::fmt::Display for AlertId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A deployment, by its endpoint's name and its own: the runtime's key. The gateway has
/// its own untyped key, [`DeploymentKey::gateway`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct DeploymentKey {
    pub endpoint: EndpointName,
    pub deployment: DeploymentName,
}

impl DeploymentKey {
    pub fn new(endpoint: &EndpointName, deployment: &DeploymentName) -> Self {
        DeploymentKey {
            endpoint: endpoint.clone(),
            deployment: deployment.clone(),
        }
    }

    pub fn gateway(&self) -> kep_gateway::DeploymentKey {
        kep_gateway::DeploymentKey {
            endpoint: self.endpoint.to_string(),
            deployment: self.deployment.to_string(),
        }
    }
}
