//! A deployment as stored (`deployments.spec`): the request resolved against the images and
//! models it names, with what its instances run pinned. The store keeps it as JSON; the
//! control plane makes it and turns it into a launch. Its types are its own, in the JSON
//! form the API's had when they were stored, so that a change of the API is not a migration;
//! the control plane converts at its edge.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::{ImageId, ImageName, ModelId, ModelName};
use kep_api::serving as api;
use kep_api::serving::{ModelConfig, VersionPolicy};
use kep_model_server::model::TensorSpec;

/// A deployment as stored: the request resolved against the images and models it names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct DeploymentSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
    #[serde(rename = "type")]
    pub(crate) kind: DeploymentType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) image: Option<ImageRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<ModelRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) script: Option<String>,
    /// The script file instances run: the inline text written out, or `serve.rhai` of the
    /// repository cloned at deploy time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) script_path: Option<String>,
    /// The command of a real model server from the PATH (`KEP_ENGINE=native`), with the
    /// model laid out for it under its own folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) native: Option<Native>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) version_policy: Option<VersionPolicy>,
    /// Batching and model instances (`triton`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model_config: Option<ModelConfig>,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) readiness: Option<Probe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) liveness: Option<Probe>,
}

/// A real model server's command and the folder the model is laid out in for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Native {
    pub(crate) dir: String,
    pub(crate) argv: Vec<String>,
}

/// The image a deployment was made from, with its command as it was then (as a container
/// runtime pins an image digest).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ImageRef {
    pub(crate) id: ImageId,
    pub(crate) name: ImageName,
    /// Empty for an engine image.
    #[serde(default)]
    pub(crate) command: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) engine: Option<EngineImageRef>,
}

/// An engine image as a deployment pins it: the engine's id it had when deployed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct EngineImageRef {
    pub(crate) reference: String,
    pub(crate) id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ModelRef {
    pub(crate) id: ModelId,
    pub(crate) name: ModelName,
    pub(crate) framework: String,
    pub(crate) path: String,
    /// A TorchScript module's inputs, as declared at upload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) inputs: Option<Vec<TensorSpec>>,
}

/// `custom-image`, `tensorflow-serving`, `triton` or `cosmos`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum DeploymentType {
    CustomImage,
    TensorflowServing,
    Triton,
    Cosmos,
}

impl DeploymentType {
    pub(crate) fn as_str(self) -> &'static str {
        api::DeploymentType::from(self).as_str()
    }
}

/// A readiness or liveness probe: exactly one of `http` and `tcp`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Probe {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) http: Option<HttpProbe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tcp: Option<TcpProbe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) interval_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) timeout_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) failure_threshold: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) initial_delay_s: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HttpProbe {
    pub(crate) path: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TcpProbe {}

impl From<api::DeploymentType> for DeploymentType {
    fn from(t: api::DeploymentType) -> Self {
        match t {
            api::DeploymentType::CustomImage => DeploymentType::CustomImage,
            api::DeploymentType::TensorflowServing => DeploymentType::TensorflowServing,
            api::DeploymentType::Triton => DeploymentType::Triton,
            api::DeploymentType::Cosmos => DeploymentType::Cosmos,
        }
    }
}

impl From<DeploymentType> for api::DeploymentType {
    fn from(t: DeploymentType) -> Self {
        match t {
            DeploymentType::CustomImage => api::DeploymentType::CustomImage,
            DeploymentType::TensorflowServing => api::DeploymentType::TensorflowServing,
            DeploymentType::Triton => api::DeploymentType::Triton,
            DeploymentType::Cosmos => api::DeploymentType::Cosmos,
        }
    }
}

impl From<api::Probe> for Probe {
    fn from(p: api::Probe) -> Self {
        let api::Probe {
            http,
            tcp,
            interval_s,
            timeout_s,
            failure_threshold,
            initial_delay_s,
        } = p;
        Probe {
            http: http.map(|h| HttpProbe { path: h.path }),
            tcp: tcp.map(|api::TcpProbe {}| TcpProbe {}),
            interval_s,
            timeout_s,
            failure_threshold,
            initial_delay_s,
        }
    }
}

impl From<Probe> for api::Probe {
    fn from(p: Probe) -> Self {
        let Probe {
            http,
            tcp,
            interval_s,
            timeout_s,
            failure_threshold,
            initial_delay_s,
        } = p;
        api::Probe {
            http: http.map(|h| api::HttpProbe { path: h.path }),
            tcp: tcp.map(|TcpProbe {}| api::TcpProbe {}),
            interval_s,
            timeout_s,
            failure_threshold,
            initial_delay_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stored deployments read back: the stored types write what the API's types wrote.
    #[test]
    fn stored_in_the_api_s_json_form() {
        let probe = r#"{"http":{"path":"/ready"},"interval_s":0.5,"timeout_s":2.0,"failure_threshold":3,"initial_delay_s":1.0}"#;
        let stored: Probe = serde_json::from_str(probe).unwrap();
        let wire: api::Probe = serde_json::from_str(probe).unwrap();
        assert_eq!(serde_json::to_string(&stored).unwrap(), probe);
        assert_eq!(api::Probe::from(stored.clone()), wire);
        assert_eq!(Probe::from(wire), stored);
        let tcp = r#"{"tcp":{}}"#;
        let stored: Probe = serde_json::from_str(tcp).unwrap();
        assert_eq!(serde_json::to_string(&stored).unwrap(), tcp);
        for kind in ["custom-image", "tensorflow-serving", "triton", "cosmos"] {
            let json = format!("\"{kind}\"");
            let stored: DeploymentType = serde_json::from_str(&json).unwrap();
            let wire: api::DeploymentType = serde_json::from_str(&json).unwrap();
            assert_eq!(api::DeploymentType::from(stored), wire);
            assert_eq!(DeploymentType::from(wire), stored);
            assert_eq!(stored.as_str(), kind);
        }
    }
}
