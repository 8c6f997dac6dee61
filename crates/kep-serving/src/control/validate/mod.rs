//! The rules a request meets on its own, without the store or the file system: names,
//! counts, ports, probes, variables, instance types, frameworks and which sources each
//! deployment type takes. The control plane checks these first, then looks up what the
//! request names. [`fields`] holds the rules of single fields, [`weights`] the traffic
//! forms.

use serde_json::Value;

use crate::ServingError;
use crate::kinds::Protocol;
use crate::settings::ServingSettings;
use kep_api::serving::{
    Command, DeploymentRequest, DeploymentType, EndpointRequest, ImageRequest, ModelConfig,
};

mod fields;
mod weights;

pub(super) use fields::{MODELS_PER_ENDPOINT, check_name};
pub use weights::{percentages, traffic_weights};

pub(super) const FRAMEWORKS: &[&str] = &["tensorflow", "pytorch", "onnx"];

/// What an image request registers: a command, or an image in the container engine.
#[derive(Debug, PartialEq)]
pub(super) enum ImageSpec {
    /// Its words, split as a shell splits them.
    Command(Vec<String>),
    Reference(String),
}

/// An image's name, and exactly one of its command and its engine reference.
pub(super) fn image(req: &ImageRequest) -> Result<ImageSpec, ServingError> {
    fields::check_name("name", &req.name)?;
    let command = match (&req.command, &req.reference) {
        (Some(command), None) => command,
        (None, Some(reference)) => return image_reference(reference).map(ImageSpec::Reference),
        (Some(_), Some(_)) => {
            return Err(ServingError::field(
                "reference",
                "an image has a command or a reference, not both",
            ));
        }
        (None, None) => {
            return Err(ServingError::field(
                "command",
                "an image needs a command or a reference",
            ));
        }
    };
    let command = match command {
        Command::Line(line) => shell_words::split(line)
            .map_err(|e| ServingError::field("command", format!("command: {e}")))?,
        Command::Words(words) => words.clone(),
    };
    if command.first().is_none_or(|c| c.is_empty()) {
        return Err(ServingError::field("command", "the command is empty"));
    }
    Ok(ImageSpec::Command(command))
}

/// An engine reference as Docker writes one: `repo[:tag]`, `repo@sha256:…` or `sha256:…`.
/// It goes into the engine API's URL path, so nothing else may be in it.
fn image_reference(reference: &str) -> Result<String, ServingError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._-/:@".contains(c);
    if reference.is_empty()
        || reference.len() > 512
        || !reference.chars().all(allowed)
        || !reference.starts_with(|c: char| c.is_ascii_alphanumeric())
    {
        return Err(ServingError::field(
            "reference",
            "reference is an image reference: repo:tag, repo@sha256:… or sha256:…",
        ));
    }
    Ok(reference.to_owned())
}

/// An uploaded model's name and framework.
pub(super) fn model(name: &str, framework: &str) -> Result<(), ServingError> {
    fields::check_name("name", name)?;
    if !FRAMEWORKS.contains(&framework) {
        return Err(ServingError::field(
            "framework",
            format!("framework is one of {}", FRAMEWORKS.join(", ")),
        ));
    }
    Ok(())
}

/// An endpoint's instance configuration, defaults filled in.
#[derive(Debug, PartialEq)]
pub(super) struct EndpointShape {
    pub(super) instance_type: String,
    pub(super) instance_count: u32,
    /// Given in any case.
    pub(super) protocol: Protocol,
}

/// An endpoint's fields, against the configured instance types and count.
pub(super) fn endpoint(
    req: &EndpointRequest,
    settings: &ServingSettings,
) -> Result<EndpointShape, ServingError> {
    fields::check_name("name", &req.name)?;
    if let Some(d) = &req.description {
        fields::check_description("description", d)?;
    }
    let instance_type = req
        .instance_type
        .clone()
        .unwrap_or_else(|| settings.default_instance_type.clone());
    if !settings.instance_types.contains_key(&instance_type) {
        return Err(ServingError::field(
            "instance_type",
            format!(
                "instance_type is one of {}",
                settings
                    .instance_types
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let instance_count = req.instance_count.unwrap_or(1);
    if instance_count > settings.max_instance_count {
        return Err(ServingError::field(
            "instance_count",
            format!("instance_count is 0 to {}", settings.max_instance_count),
        ));
    }
    let protocol = match req
        .protocol
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("http") => Protocol::Http,
        Some("grpc") => Protocol::Grpc,
        Some(_) => return Err(ServingError::field("protocol", "protocol is http or grpc")),
    };
    Ok(EndpointShape {
        instance_type,
        instance_count,
        protocol,
    })
}

/// A deployment's fields and its type's rules: what it must, may and may not name. An edit
/// is checked as the request it makes of the deployment.
pub(super) fn deployment(
    req: &DeploymentRequest,
    settings: &ServingSettings,
) -> Result<(), ServingError> {
    fields::check_name("name", &req.name)?;
    if let Some(d) = &req.description {
        fields::check_description("description", d)?;
    }
    fields::check_env(&req.env)?;
    probes_and_port(req)?;
    sources(req)?;
    script(req, settings.max_script_bytes)
}

/// Health checks and the port are a custom image's: the platform knows the others'.
fn probes_and_port(req: &DeploymentRequest) -> Result<(), ServingError> {
    let custom = req.kind == DeploymentType::CustomImage;
    for (field, probe) in [("readiness", &req.readiness), ("liveness", &req.liveness)] {
        if let Some(p) = probe {
            if !custom {
                return Err(ServingError::field(
                    field,
                    "health checks are set for custom-image deployments only; the platform manages the others",
                ));
            }
            fields::check_probe(field, p)?;
        }
    }
    if !custom && req.port.is_some() {
        return Err(ServingError::field(
            "port",
            "port is set for custom-image deployments only",
        ));
    }
    if req.port == Some(0) {
        return Err(ServingError::field("port", "port is 1 to 65535"));
    }
    Ok(())
}

fn forbid(req: &DeploymentRequest, field: &str, what: &str) -> ServingError {
    ServingError::field(
        field,
        format!("a {} deployment takes no {what}", req.kind.as_str()),
    )
}

/// A custom image names an image and no model; the other types a model and no image.
fn sources(req: &DeploymentRequest) -> Result<(), ServingError> {
    let custom = req.kind == DeploymentType::CustomImage;
    match (&req.image, custom) {
        (None, true) => {
            return Err(ServingError::field(
                "image",
                "a custom-image deployment needs an image",
            ));
        }
        (Some(_), false) => return Err(forbid(req, "image", "image")),
        _ => {}
    }
    match (&req.model, custom) {
        (Some(_), true) => Err(forbid(req, "model", "separate model: the image holds it")),
        (None, false) => Err(ServingError::field(
            "model",
            format!("a {} deployment needs a model", req.kind.as_str()),
        )),
        _ => Ok(()),
    }
}

/// A Cosmos deployment's serving script, 1 to `max_bytes` bytes; no other type takes one.
fn script(req: &DeploymentRequest, max_bytes: usize) -> Result<(), ServingError> {
    match (&req.script, req.kind) {
        (Some(s), DeploymentType::Cosmos) => {
            if s.trim().is_empty() || s.len() > max_bytes {
                return Err(ServingError::field(
                    "script",
                    format!("the script is 1 to {max_bytes} bytes"),
                ));
            }
            Ok(())
        }
        (None, DeploymentType::Cosmos) => Err(ServingError::field(
            "script",
            "a cosmos deployment needs a serving script (text or repository URL)",
        )),
        (Some(_), _) => Err(forbid(req, "script", "script")),
        (None, _) => Ok(()),
    }
}

/// A deployment's `model_config`: `triton`'s only, whole (`ModelConfig::check`); its
/// `max_batch_size`, 0 without one.
pub(super) fn model_config(
    kind: DeploymentType,
    config: Option<&ModelConfig>,
) -> Result<u32, ServingError> {
    let Some(config) = config else {
        return Ok(0);
    };
    if kind != DeploymentType::Triton {
        return Err(ServingError::field(
            "model_config",
            format!(
                "a {} deployment takes no model_config: only triton batches",
                kind.as_str()
            ),
        ));
    }
    config
        .check()
        .map_err(|e| ServingError::field("model_config", e))?;
    Ok(config.max_batch_size.unwrap_or(0))
}

/// The frameworks a model type serves: TensorFlow Serving takes TensorFlow models only.
pub(super) fn served_framework(kind: DeploymentType, framework: &str) -> Result<(), ServingError> {
    let allowed: &[&str] = match kind {
        DeploymentType::TensorflowServing => &["tensorflow"],
        _ => FRAMEWORKS,
    };
    if !allowed.contains(&framework) {
        return Err(ServingError::field(
            "model",
            format!(
                "a {} deployment serves {} models, not {framework}",
                kind.as_str(),
                allowed.join(" or "),
            ),
        ));
    }
    Ok(())
}

/// An edit's body: the name, the type and the instance configuration are fixed.
pub(crate) fn patch_fields(body: &Value) -> Result<(), ServingError> {
    for fixed in ["name", "type", "instance_type", "instance_count"] {
        if body.get(fixed).is_some() {
            return Err(ServingError::field(
                fixed,
                format!("{fixed} cannot be changed after creation"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
