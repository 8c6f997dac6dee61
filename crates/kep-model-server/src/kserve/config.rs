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
    /// 0: the inputs' first dimension is part of their shape, not a batch Triton forms.
    pub max_batch_size: i32,
    pub input: Vec<ConfigInput>,
    pub output: Vec<ConfigOutput>,
    pub instance_group: Vec<InstanceGroup>,
    pub default_model_filename: &'static str,
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
pub fn platform(served: &Served) -> (&'static str, &'static str, &'static str) {
    match served.model.format {
        Format::Onnx => ("onnxruntime_onnx", "onnxruntime", "model.onnx"),
        Format::FrozenGraph => ("tensorflow_graphdef", "tensorflow", "model.graphdef"),
        Format::SavedModel => ("tensorflow_savedmodel", "tensorflow", "model.savedmodel"),
        Format::TorchScript => ("pytorch_libtorch", "pytorch", "model.pt"),
    }
}

/// The configuration of `served`.
pub fn model_config(served: &Served) -> ModelConfig {
    let gpus = &served.gpus;
    let (platform, backend, file) = platform(served);
    ModelConfig {
        name: served.name.clone(),
        platform,
        backend,
        version_policy: VersionPolicy {
            latest: Latest { num_versions: 1 },
        },
        max_batch_size: 0,
        input: served.model.inputs.iter().map(input).collect(),
        output: served.model.outputs.iter().map(output).collect(),
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

fn input(spec: &TensorSpec) -> ConfigInput {
    ConfigInput {
        name: spec.name.clone(),
        data_type: spec.datatype.config_name(),
        format: "FORMAT_NONE",
        dims: spec.shape.clone(),
        is_shape_tensor: false,
        allow_ragged_batch: false,
        optional: false,
    }
}

fn output(spec: &TensorSpec) -> ConfigOutput {
    ConfigOutput {
        name: spec.name.clone(),
        data_type: spec.datatype.config_name(),
        dims: spec.shape.clone(),
        label_filename: "",
        is_shape_tensor: false,
    }
}
