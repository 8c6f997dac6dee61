//! The real model servers a user may run instead of `kep model-server` when they are on the
//! PATH: `tritonserver` for `triton` deployments, `tensorflow_model_server` for
//! `tensorflow-serving` ones. Each is given the model laid out as it expects: a Triton model
//! repository with a `config.pbtxt` written from the model's signature, or a TF Serving
//! base path holding a SavedModel made from the frozen GraphDef.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use prost::Message as _;
use tract_tensorflow::tfpb::tensorflow as tf;

use crate::model::{DataType, Signature, TensorSpec, is_onnx};

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

/// Lays out a Triton model repository at `repository` for model `name` and returns the
/// argv that serves it on `$PORT`, on 127.0.0.1, HTTP only.
pub fn triton(
    repository: &Path,
    name: &str,
    model: &Path,
    signature: &Signature,
) -> std::io::Result<Vec<String>> {
    let (platform, file) = if is_onnx(model) {
        ("onnxruntime_onnx", "model.onnx")
    } else {
        ("tensorflow_graphdef", "model.graphdef")
    };
    let version = repository.join(name).join("1");
    std::fs::create_dir_all(&version)?;
    std::os::unix::fs::symlink(model, version.join(file))?;
    std::fs::write(
        repository.join(name).join("config.pbtxt"),
        triton_config(name, platform, signature),
    )?;
    Ok(shell(
        "exec tritonserver --model-repository=\"$1\" --http-port=\"$PORT\" \
         --http-address=127.0.0.1 --allow-grpc=false --allow-metrics=false",
        &[repository],
    ))
}

/// `config.pbtxt`: the whole shape in `dims` (no implicit batch dimension), so it states
/// exactly the signature kep shows.
fn triton_config(name: &str, platform: &str, (inputs, outputs): &Signature) -> String {
    let mut out = format!("name: {name:?}\nplatform: {platform:?}\nmax_batch_size: 0\n");
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

/// Writes a SavedModel of the frozen GraphDef `model` under `base/1` (its `serving_default`
/// signature from the model's inputs and outputs; a frozen graph has no variables) and
/// returns the argv that serves it as `name`: REST on `$PORT`, gRPC on a socket only.
pub fn tf_serving(
    base: &Path,
    name: &str,
    model: &Path,
    signature: &Signature,
) -> Result<Vec<String>, String> {
    if is_onnx(model) {
        return Err(format!(
            "{TENSORFLOW_MODEL_SERVER} serves TensorFlow graphs; this model is ONNX: \
             choose the tract or onnxruntime engine"
        ));
    }
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
    std::fs::write(version.join("saved_model.pb"), saved.encode_to_vec()).map_err(io)?;
    Ok(shell(
        "exec tensorflow_model_server --rest_api_port=\"$PORT\" --port=0 \
         --grpc_socket_path=\"$1/grpc-$PORT.sock\" --model_name=\"$2\" --model_base_path=\"$1\"",
        &[base, Path::new(name)],
    ))
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
        );
        assert_eq!(
            config,
            "name: \"mlp\"\nplatform: \"onnxruntime_onnx\"\nmax_batch_size: 0\ninput [\n  \
             { name: \"x\" data_type: TYPE_FP32 dims: [ -1, 4 ] }\n]\noutput [\n  \
             { name: \"probs\" data_type: TYPE_FP32 dims: [ -1, 3 ] },\n  \
             { name: \"label\" data_type: TYPE_STRING dims: [ -1 ] }\n]\n"
        );
    }
}
