//! The served model's Triton model configuration, as `GET /v2/models/{m}/config` and the
//! gRPC `ModelConfig` call show it: the configuration kep would write for `tritonserver`
//! (`native::triton`), with the fields Triton fills in itself.

use serde::Serialize;

use crate::Served;
use crate::model::{Format, TensorSpec};

#[derive(Debug, Clone, Serialize)]
pub struct ModelConfig {
    pub name: String,
    pub platform: &'static str,
    pub backend: &'static str,
    pub version_policy: VersionPolicy,
    /// 0: the inputs' first dimension is part of their shape, not a batch Triton forms;
    /// otherwise `dims` leave the batch dimension out.
    pub max_batch_size: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynamic_batching: Option<DynamicBatching>,
    pub input: Vec<ConfigInput>,
    pub output: Vec<ConfigOutput>,
    pub instance_group: Vec<InstanceGroup>,
    pub default_model_filename: &'static str,
}

/// Triton's `ModelDynamicBatching`, as its JSON shows it.
#[derive(Debug, Clone, Serialize)]
pub struct DynamicBatching {
    pub preferred_batch_size: Vec<i32>,
    pub max_queue_delay_microseconds: u64,
    pub preserve_ordering: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct VersionPolicy {
    pub latest: Latest,
}

#[derive(Debug, Clone, Serialize)]
pub struct Latest {
    pub num_versions: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConfigInput {
    pub name: String,
    pub data_type: &'static str,
    pub format: &'static str,
    pub dims: Vec<i64>,
    pub is_shape_tensor: bool,
    pub allow_ragged_batch: bool,
    pub optional: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConfigOutput {
    pub name: String,
    pub data_type: &'static str,
    pub dims: Vec<i64>,
    pub label_filename: &'static str,
    pub is_shape_tensor: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct InstanceGroup {
    pub name: String,
    /// `KIND_GPU` when the instance was given GPUs (`gpus`), else `KIND_CPU`.
    pub kind: &'static str,
    pub count: i32,
    pub gpus: Vec<i32>,
}

/// The platform Triton would run the model on, its backend and its file's name.
pub fn platform(model: &crate::Model) -> (&'static str, &'static str, &'static str) {
    match model.format {
        Format::Onnx => ("onnxruntime_onnx", "onnxruntime", "model.onnx"),
        Format::FrozenGraph => ("tensorflow_graphdef", "tensorflow", "model.graphdef"),
        Format::SavedModel => ("tensorflow_savedmodel", "tensorflow", "model.savedmodel"),
        Format::TorchScript => ("pytorch_libtorch", "pytorch", "model.pt"),
    }
}

/// The configuration of `served`, as `version` runs it.
pub fn model_config(served: &Served, version: &crate::Version) -> ModelConfig {
    let gpus = &served.gpus;
    let model = version.model();
    let batching = served.batching.as_ref();
    let batched = batching.is_some();
    let (platform, backend, file) = platform(model);
    ModelConfig {
        name: served.name.clone(),
        platform,
        backend,
        version_policy: VersionPolicy {
            latest: Latest {
                num_versions: u32::try_from(served.versions.len()).unwrap_or(u32::MAX),
            },
        },
        max_batch_size: batching.map_or(0, |b| i32::try_from(b.max_batch_size).unwrap_or(i32::MAX)),
        dynamic_batching: batching
            .and_then(|b| b.dynamic.as_ref())
            .map(|d| DynamicBatching {
                preferred_batch_size: (d.preferred_batch_sizes.iter())
                    .map(|&s| i32::try_from(s).unwrap_or(i32::MAX))
                    .collect(),
                max_queue_delay_microseconds: u64::try_from(d.max_queue_delay.as_micros())
                    .unwrap_or(u64::MAX),
                preserve_ordering: false,
            }),
        input: model.inputs.iter().map(|s| input(s, batched)).collect(),
        output: model.outputs.iter().map(|s| output(s, batched)).collect(),
        instance_group: vec![InstanceGroup {
            name: served.name.clone(),
            kind: if gpus.is_empty() {
                "KIND_CPU"
            } else {
                "KIND_GPU"
            },
            count: i32::try_from(served.model_instances).unwrap_or(i32::MAX),
            gpus: gpus.to_vec(),
        }],
        default_model_filename: file,
    }
}

/// A tensor's dims as Triton's configuration gives them: without the batch dimension for a
/// batched model.
fn dims(spec: &TensorSpec, batched: bool) -> Vec<i64> {
    spec.shape[usize::from(batched).min(spec.shape.len())..].to_vec()
}

fn input(spec: &TensorSpec, batched: bool) -> ConfigInput {
    ConfigInput {
        name: spec.name.clone(),
        data_type: spec.datatype.config_name(),
        format: "FORMAT_NONE",
        dims: dims(spec, batched),
        is_shape_tensor: false,
        allow_ragged_batch: false,
        optional: false,
    }
}

fn output(spec: &TensorSpec, batched: bool) -> ConfigOutput {
    ConfigOutput {
        name: spec.name.clone(),
        data_type: spec.datatype.config_name(),
        dims: dims(spec, batched),
        label_filename: "",
        is_shape_tensor: false,
    }
}
