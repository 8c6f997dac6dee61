//! A deployment as stored (`deployments.spec`): the request resolved against the images and
//! models it names, with what its instances run pinned. The store keeps it as JSON; the
//! control plane makes it and turns it into a launch.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::{ImageId, ImageName, ModelId, ModelName};
use kep_api::serving::{DeploymentType, Probe};

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
}
