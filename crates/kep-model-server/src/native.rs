//! The real model servers a user may run instead of `kep model-server` when they are on the
//! PATH: `tritonserver` for `triton` deployments, `tensorflow_model_server` for
//! `tensorflow-serving` ones. Each is given the model laid out as it expects: a Triton model
//! repository with a `config.pbtxt` written from the model's signature and version policy,
//! or a TF Serving base path of numbered versions (a SavedModel's own, or one made from a
//! frozen GraphDef) with a model config file naming the version policy.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use prost::Message as _;
use tract_tensorflow::tfpb::tensorflow as tf;

use crate::artifact::{Artifact, SavedModelVersion, unpack_saved_model};
use crate::model::{DataType, Format, Signature, TensorSpec};
use crate::versions::VersionPolicy;

pub const TRITONSERVER: &str = "tritonserver";
pub const TENSORFLOW_MODEL_SERVER: &str = "tensorflow_model_server";

/// `program` as the PATH finds it: an executable file in one of its folders.
pub fn on_path(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// A registered model, as kep read it at upload, and the versions a deployment serves.
pub struct Registered<'a> {
    pub name: &'a str,
    pub file: &'a Path,
    pub format: Format,
    /// Its (default signature's) inputs and outputs.
    pub signature: &'a Signature,
    pub policy: &'a VersionPolicy,
}

impl Registered<'_> {
    /// A SavedModel archive's versions, unpacked beside the layout at `at` (outside a
    /// repository or base path, which the servers scan).
    fn unpacked(&self, at: &Path) -> Result<Vec<SavedModelVersion>, String> {
        let into = at.with_file_name("savedmodel");
        std::fs::create_dir_all(&into).map_err(|e| e.to_string())?;
        let kind = Artifact::of(self.file).map_err(|e| e.to_string())?;
        unpack_saved_model(self.file, kind, &into).map_err(|e| e.to_string())
    }
}

/// Lays out a Triton model repository at `repository` for the model and returns the argv
/// that serves it on `$PORT`, on 127.0.0.1, HTTP only.
pub fn triton(repository: &Path, m: &Registered) -> Result<Vec<String>, String> {
    let io = |e: std::io::Error| e.to_string();
    let dir = repository.join(m.name);
    let link = |version: u64, file: &str, target: &Path| {
        let at = dir.join(version.to_string());
        std::fs::create_dir_all(&at)?;
        std::os::unix::fs::symlink(target, at.join(file))
    };
    let platform = match m.format {
        Format::SavedModel => {
            for v in m.unpacked(repository)? {
                link(v.version, "model.savedmodel", &v.dir).map_err(io)?;
            }
            "tensorflow_savedmodel"
        }
        format => {
            let (platform, file) = match format {
                Format::Onnx => ("onnxruntime_onnx", "model.onnx"),
                Format::FrozenGraph => ("tensorflow_graphdef", "model.graphdef"),
                _ => ("pytorch_libtorch", "model.pt"),
            };
            link(1, file, m.file).map_err(io)?;
            platform
        }
    };
    std::fs::write(
        dir.join("config.pbtxt"),
        triton_config(m.name, platform, m.signature, m.policy),
    )
    .map_err(io)?;
    Ok(shell(
        "exec tritonserver --model-repository=\"$1\" --http-port=\"$PORT\" \
         --http-address=127.0.0.1 --allow-grpc=false --allow-metrics=false",
        &[repository],
    ))
}

/// `config.pbtxt`: the whole shape in `dims` (no implicit batch dimension), so it states
/// exactly the signature kep shows.
fn triton_config(
    name: &str,
    platform: &str,
    (inputs, outputs): &Signature,
    policy: &VersionPolicy,
) -> String {
    let policy = match policy {
        VersionPolicy::Latest(n) => format!("latest: {{ num_versions: {n} }}"),
        VersionPolicy::All(_) => "all: { }".to_owned(),
        VersionPolicy::Specific(v) => format!("specific: {{ versions: {v:?} }}"),
    };
    let mut out = format!(
        "name: {name:?}\nplatform: {platform:?}\nmax_batch_size: 0\nversion_policy: {{ {policy} }}\n"
    );
    for (section, specs) in [("input", inputs), ("output", outputs)] {
        let _ = writeln!(out, "{section} [");
        for (i, spec) in specs.iter().enumerate() {
            let dims: Vec<String> = spec.shape.iter().map(i64::to_string).collect();
            let _ = writeln!(
                out,
                "  {{ name: {:?} data_type: {} dims: [ {} ] }}{}",
                spec.name,
                spec.datatype.config_name(),
                dims.join(", "),
                if i + 1 < specs.len() { "," } else { "" }
            );
        }
        let _ = writeln!(out, "]");
    }
    out
}

/// Lays out TF Serving's base path at `base`: a SavedModel's versions as they are, or a
/// SavedModel made of the frozen GraphDef under `base/1` (its `serving_default` signature
/// from the model's inputs and outputs; a frozen graph has no variables), and a model
/// config file naming the version policy. Returns the argv that serves it as the model's
/// name: REST on `$PORT`, gRPC on a socket only.
pub fn tf_serving(base: &Path, m: &Registered) -> Result<Vec<String>, String> {
    let io = |e: std::io::Error| e.to_string();
    match m.format {
        Format::SavedModel => {
            std::fs::create_dir_all(base).map_err(io)?;
            for v in m.unpacked(base)? {
                std::os::unix::fs::symlink(&v.dir, base.join(v.version.to_string())).map_err(io)?;
            }
        }
        Format::FrozenGraph => frozen_graph_saved_model(base, m.file, m.signature)?,
        _ => {
            return Err(format!(
                "{TENSORFLOW_MODEL_SERVER} serves TensorFlow graphs; this model is {}: \
                 choose the tract or onnxruntime engine",
                m.format.name()
            ));
        }
    }
    let policy = match m.policy {
        VersionPolicy::Latest(n) => format!("latest {{ num_versions: {n} }}"),
        VersionPolicy::All(_) => "all { }".to_owned(),
        VersionPolicy::Specific(v) => {
            let listed: Vec<String> = v.iter().map(|v| format!("versions: {v}")).collect();
            format!("specific {{ {} }}", listed.join(" "))
        }
    };
    let config = base.with_file_name("models.config");
    let text = format!(
        "model_config_list {{\n  config {{\n    name: {:?}\n    base_path: {:?}\n    \
         model_platform: \"tensorflow\"\n    model_version_policy {{ {policy} }}\n  }}\n}}\n",
        m.name,
        base.to_string_lossy()
    );
    std::fs::write(&config, text).map_err(io)?;
    Ok(shell(
        "exec tensorflow_model_server --rest_api_port=\"$PORT\" --port=0 \
         --grpc_socket_path=\"$1/grpc-$PORT.sock\" --model_config_file=\"$2\"",
        &[base, &config],
    ))
}

/// A SavedModel of the frozen GraphDef at `model`, under `base/1`.
fn frozen_graph_saved_model(
    base: &Path,
    model: &Path,
    signature: &Signature,
) -> Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
    let graph = tf::GraphDef::decode(std::fs::read(model).map_err(io)?.as_slice())
        .map_err(|e| e.to_string())?;
    let infos = |specs: &[TensorSpec]| {
        specs
            .iter()
            .map(|s| {
                let tensor = if s.name.contains(':') {
                    s.name.clone()
                } else {
                    format!("{}:0", s.name)
                };
                let key = s.name.split(':').next().unwrap_or_default().to_owned();
                (
                    key,
                    tf::TensorInfo {
                        dtype: tf_type(s.datatype) as i32,
                        tensor_shape: Some(tf::TensorShapeProto {
                            dim: s
                                .shape
                                .iter()
                                .map(|&size| tf::tensor_shape_proto::Dim {
                                    size,
                                    name: String::new(),
                                })
                                .collect(),
                            unknown_rank: false,
                        }),
                        encoding: Some(tf::tensor_info::Encoding::Name(tensor)),
                    },
                )
            })
            .collect()
    };
    let saved = tf::SavedModel {
        saved_model_schema_version: 1,
        meta_graphs: vec![tf::MetaGraphDef {
            meta_info_def: Some(tf::meta_graph_def::MetaInfoDef {
                tags: vec!["serve".into()],
                ..Default::default()
            }),
            graph_def: Some(graph),
            signature_def: [(
                "serving_default".to_owned(),
                tf::SignatureDef {
                    inputs: infos(&signature.0),
                    outputs: infos(&signature.1),
                    method_name: "tensorflow/serving/predict".into(),
                },
            )]
            .into(),
            ..Default::default()
        }],
    };
    let version = base.join("1");
    std::fs::create_dir_all(version.join("variables")).map_err(io)?;
    std::fs::write(version.join("saved_model.pb"), saved.encode_to_vec()).map_err(io)
}

/// TensorFlow's `DataType` of a protocol type.
fn tf_type(t: DataType) -> tf::DataType {
    match t {
        DataType::Bool => tf::DataType::DtBool,
        DataType::Uint8 => tf::DataType::DtUint8,
        DataType::Uint16 => tf::DataType::DtUint16,
        DataType::Uint32 => tf::DataType::DtUint32,
        DataType::Uint64 => tf::DataType::DtUint64,
        DataType::Int8 => tf::DataType::DtInt8,
        DataType::Int16 => tf::DataType::DtInt16,
        DataType::Int32 => tf::DataType::DtInt32,
        DataType::Int64 => tf::DataType::DtInt64,
        DataType::Fp16 => tf::DataType::DtHalf,
        DataType::Fp32 => tf::DataType::DtFloat,
        DataType::Fp64 => tf::DataType::DtDouble,
        DataType::Bytes => tf::DataType::DtString,
    }
}

/// `sh -c SCRIPT` with `args` as `$1…`: the servers take their port in a flag, and only the
/// shell can read it from `$PORT`, which the runtime sets per instance.
fn shell(script: &str, args: &[&Path]) -> Vec<String> {
    let mut argv = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        script.to_owned(),
        "sh".to_owned(),
    ];
    argv.extend(args.iter().map(|a| a.to_string_lossy().into_owned()));
    argv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triton_configs_state_the_whole_signature() {
        let spec = |name: &str, datatype, shape: &[i64]| TensorSpec {
            name: name.into(),
            datatype,
            shape: shape.to_vec(),
        };
        let config = triton_config(
            "mlp",
            "onnxruntime_onnx",
            &(
                vec![spec("x", DataType::Fp32, &[-1, 4])],
                vec![
                    spec("probs", DataType::Fp32, &[-1, 3]),
                    spec("label", DataType::Bytes, &[-1]),
                ],
            ),
            &VersionPolicy::Specific(vec![1, 3]),
        );
        assert_eq!(
            config,
            "name: \"mlp\"\nplatform: \"onnxruntime_onnx\"\nmax_batch_size: 0\n\
             version_policy: { specific: { versions: [1, 3] } }\ninput [\n  \
             { name: \"x\" data_type: TYPE_FP32 dims: [ -1, 4 ] }\n]\noutput [\n  \
             { name: \"probs\" data_type: TYPE_FP32 dims: [ -1, 3 ] },\n  \
             { name: \"label\" data_type: TYPE_STRING dims: [ -1 ] }\n]\n"
        );
    }
}
