//! A model file loaded as the versions a deployment serves (CONTRACT §3): an ONNX model
//! or frozen GraphDef is version 1 on kep's engine; a SavedModel's versions and a
//! TorchScript file run on their framework's own runtime: a SavedModel in this process
//! through TensorFlow's C API where [`Runtime::in_process`] asks, else, like TorchScript,
//! in one worker process.

use std::path::Path;
use std::sync::Arc;

use crate::artifact::{Artifact, unpack_saved_model};
use crate::framework::tensorflow::Session;
use crate::framework::{SignatureDef, Worker};
use crate::model::{DataType, Engine, Format, Model, ModelError, TensorSpec};
use crate::tfserving::grpc::{SignatureDefs, tensorflow as tf};
use crate::{Signature, Version};

pub use kep_api::serving::VersionPolicy;

/// What a policy loads of a model's versions.
pub trait Select {
    /// The versions of `available` (ascending) the policy loads; an error names a
    /// specific version the model does not have.
    fn select(&self, available: &[i64]) -> Result<Vec<i64>, String>;
}

impl Select for VersionPolicy {
    fn select(&self, available: &[i64]) -> Result<Vec<i64>, String> {
        match self {
            VersionPolicy::Latest(n) => {
                let skip = available.len().saturating_sub(*n as usize);
                Ok(available[skip..].to_vec())
            }
            VersionPolicy::All(_) => Ok(available.to_vec()),
            VersionPolicy::Specific(wanted) => {
                let missing: Vec<String> = (wanted.iter())
                    .filter(|v| !available.contains(v))
                    .map(i64::to_string)
                    .collect();
                if !missing.is_empty() {
                    return Err(format!(
                        "the model has no version {}: its versions are {}",
                        missing.join(", "),
                        available
                            .iter()
                            .map(i64::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                Ok(available
                    .iter()
                    .copied()
                    .filter(|v| wanted.contains(v))
                    .collect())
            }
        }
    }
}

/// How framework models run.
#[derive(Debug, Default, Clone, Copy)]
pub struct Runtime {
    /// The framework's compute threads (an instance's CPUs, as a container would give
    /// it); unset, the framework's default.
    pub threads: Option<usize>,
    /// TorchScript calls run at once inside this process (Triton's model instances);
    /// others wait their turn. 0 is 1.
    pub instances: usize,
    /// Framework models in this process (a model server's instance: no pipe on the way):
    /// SavedModels through TensorFlow's C API, TorchScript in the framework Python's
    /// interpreter. Otherwise, and where those cannot be opened, in a worker process (`kep
    /// serve`'s upload checks, which must not keep a framework in the server).
    pub in_process: bool,
}

/// The versions a model file serves, loaded, and what they need kept: the folder a
/// SavedModel archive was unpacked in.
pub struct Loaded {
    pub format: Format,
    /// Every version the file has, ascending.
    pub available: Vec<i64>,
    pub versions: Vec<Version>,
    /// Where a SavedModel archive was unpacked: removed when dropped.
    pub unpacked: Option<tempfile::TempDir>,
    /// The framework worker the versions run in, if they run in one.
    pub worker: Option<Arc<Worker>>,
}

/// Loads the versions of `path` that `policy` names. `inputs` are a TorchScript
/// module's, declared at upload (TorchScript records none).
pub fn load(
    path: &Path,
    engine: Engine,
    policy: &VersionPolicy,
    inputs: Option<&[TensorSpec]>,
    runtime: Runtime,
) -> Result<Loaded, ModelError> {
    let chosen = |available: &[i64]| policy.select(available).map_err(ModelError::Unreadable);
    match Artifact::of(path)? {
        Artifact::Protobuf => {
            chosen(&[1])?;
            let model = Model::load(path, engine)?;
            Ok(Loaded {
                format: model.format,
                available: vec![1],
                versions: vec![Version::of_file(model)],
                unpacked: None,
                worker: None,
            })
        }
        Artifact::TorchScript => {
            chosen(&[1])?;
            let inputs = inputs.ok_or_else(|| {
                ModelError::Unreadable(
                    "a TorchScript module needs its inputs declared: TorchScript records no datatypes or shapes".into(),
                )
            })?;
            let worker = match runtime
                .in_process
                .then(|| Worker::embedded(runtime.threads, runtime.instances))
            {
                Some(Ok(worker)) => worker,
                Some(Err(why)) => {
                    tracing::warn!("TorchScript runs in a worker process: {why}");
                    Worker::start_threads(runtime.threads)?
                }
                None => Worker::start_threads(runtime.threads)?,
            };
            let signature = worker.load_torchscript("1", path, inputs)?;
            Ok(Loaded {
                format: Format::TorchScript,
                available: vec![1],
                versions: vec![in_framework(
                    &worker,
                    1,
                    Format::TorchScript,
                    vec![signature],
                    None,
                )],
                unpacked: None,
                worker: Some(worker),
            })
        }
        kind => {
            let dir = tempfile::Builder::new()
                .prefix("kep-savedmodel-")
                .tempdir()
                .map_err(|e| ModelError::Unreadable(e.to_string()))?;
            let found = unpack_saved_model(path, kind, dir.path())?;
            let available: Vec<i64> = found.iter().map(|v| v.version as i64).collect();
            let wanted = chosen(&available)?;
            let found: Vec<_> = (found.into_iter())
                .filter(|v| wanted.contains(&(v.version as i64)))
                .collect();
            if runtime.in_process {
                match in_sessions(&found, runtime.threads) {
                    Err(ModelError::EngineUnavailable(why)) => {
                        tracing::warn!("SavedModels run in a worker process: {why}");
                    }
                    loaded => {
                        return Ok(Loaded {
                            format: Format::SavedModel,
                            available,
                            versions: loaded?,
                            unpacked: Some(dir),
                            worker: None,
                        });
                    }
                }
            }
            let worker = Worker::start_threads(runtime.threads)?;
            let mut versions = Vec::with_capacity(wanted.len());
            for v in &found {
                let number = v.version as i64;
                let signatures = worker.load_saved_model(&number.to_string(), &v.dir)?;
                let defs = signature_defs(&v.dir)?;
                versions.push(in_framework(
                    &worker,
                    number,
                    Format::SavedModel,
                    signatures,
                    Some(defs),
                ));
            }
            Ok(Loaded {
                format: Format::SavedModel,
                available,
                versions,
                unpacked: Some(dir),
                worker: Some(worker),
            })
        }
    }
}

/// Each SavedModel version in a session of its own, its signatures read from its
/// SignatureDefs as TF Serving reads them.
fn in_sessions(
    found: &[crate::artifact::SavedModelVersion],
    threads: Option<usize>,
) -> Result<Vec<Version>, ModelError> {
    let mut versions = Vec::with_capacity(found.len());
    for v in found {
        let defs = signature_defs(&v.dir)?;
        let session = Arc::new(Session::load(&v.dir, threads)?);
        let mut named: Vec<_> = (defs.iter())
            // `__saved_model_init_op` and its kind are the loader's, not callers'.
            .filter(|(name, _)| !name.starts_with("__"))
            .collect();
        named.sort_by_key(|(name, _)| (name.as_str() != crate::DEFAULT_SIGNATURE, name.as_str()));
        let mut signatures = Vec::with_capacity(named.len());
        let endpoints = |tensors: Vec<(TensorSpec, String)>| {
            (tensors.into_iter())
                .map(|(spec, tensor)| Ok((spec, session.output(&tensor)?)))
                .collect::<Result<Vec<_>, ModelError>>()
        };
        for (name, def) in named {
            let inputs = endpoints(tensors(name, &def.inputs)?)?;
            let outputs = endpoints(tensors(name, &def.outputs)?)?;
            let model = Model::in_session(Arc::clone(&session), inputs, outputs);
            signatures.push(Signature {
                name: name.clone(),
                method: def.method_name.clone(),
                model: Arc::new(model),
            });
        }
        if signatures.is_empty() {
            return Err(ModelError::Unreadable(format!(
                "version {} has no signature to serve",
                v.version
            )));
        }
        versions.push(Version {
            number: v.version as i64,
            signatures,
            signature_defs: Some(defs),
        });
    }
    Ok(versions)
}

/// A signature's inputs or outputs by key, as specs and the graph tensors they name.
fn tensors(
    signature: &str,
    infos: &std::collections::HashMap<String, tf::TensorInfo>,
) -> Result<Vec<(TensorSpec, String)>, ModelError> {
    let mut sorted: Vec<_> = infos.iter().collect();
    sorted.sort_by_key(|(key, _)| key.as_str());
    sorted
        .into_iter()
        .map(|(key, info)| {
            let what = |why: &str| ModelError::Unreadable(format!("{signature}: {key} {why}"));
            let Some(tf::tensor_info::Encoding::Name(tensor)) = &info.encoding else {
                return Err(what("is not a dense tensor"));
            };
            let dt = tf::DataType::try_from(info.dtype).unwrap_or(tf::DataType::DtInvalid);
            let datatype = (DataType::ALL.into_iter())
                .find(|d| crate::tfserving::grpc::tensor::dtype(*d) == dt)
                .ok_or_else(|| {
                    what(&format!(
                        "has type {}, which kep does not serve",
                        dt.as_str_name()
                    ))
                })?;
            let shape = info.tensor_shape.clone().unwrap_or_default();
            if shape.unknown_rank {
                return Err(what("has no known rank"));
            }
            let spec = TensorSpec {
                name: key.clone(),
                datatype,
                shape: shape.dim.iter().map(|d| d.size.max(-1)).collect(),
            };
            Ok((spec, tensor.clone()))
        })
        .collect()
}

/// A version whose signatures run in `worker`, loaded there under its number.
fn in_framework(
    worker: &Arc<Worker>,
    number: i64,
    format: Format,
    signatures: Vec<SignatureDef>,
    signature_defs: Option<crate::tfserving::grpc::SignatureDefs>,
) -> Version {
    let key = number.to_string();
    // The method as the SavedModel records it; TorchScript's `forward` predicts.
    let method = |def: &SignatureDef| {
        let stored = (signature_defs.as_ref())
            .and_then(|defs| defs.get(&def.name))
            .map(|d| d.method_name.clone());
        (stored.or(def.method.clone()))
            .unwrap_or_else(|| crate::tfserving::Method::Predict.name().to_owned())
    };
    let signatures = signatures
        .iter()
        .map(|def| Signature {
            name: def.name.clone(),
            method: method(def),
            model: Arc::new(Model::in_framework(Arc::clone(worker), &key, format, def)),
        })
        .collect();
    Version {
        number,
        signatures,
        signature_defs,
    }
}

/// `saved_model.proto`'s message, with the MetaGraphDef TF Serving's own protos define.
#[derive(Clone, PartialEq, prost::Message)]
struct SavedModel {
    #[prost(int64, tag = "1")]
    saved_model_schema_version: i64,
    #[prost(message, repeated, tag = "2")]
    meta_graphs: Vec<crate::tfserving::grpc::tensorflow::MetaGraphDef>,
}

/// The SignatureDefs of the MetaGraph TF Serving loads (tagged `serve`), as they are
/// stored: its metadata answers them verbatim.
fn signature_defs(dir: &Path) -> Result<SignatureDefs, ModelError> {
    use prost::Message as _;
    let bytes = std::fs::read(dir.join("saved_model.pb"))
        .map_err(|e| ModelError::Unreadable(e.to_string()))?;
    let saved = SavedModel::decode(bytes.as_slice())
        .map_err(|e| ModelError::Unreadable(format!("saved_model.pb: {e}")))?;
    let serve = (saved.meta_graphs.iter())
        .find(|m| (m.meta_info_def.as_ref()).is_some_and(|i| i.tags.iter().any(|t| t == "serve")))
        .or(saved.meta_graphs.first())
        .ok_or_else(|| ModelError::Unreadable("saved_model.pb holds no MetaGraph".into()))?;
    Ok(serve.signature_def.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_reads_as_tf_servings_and_selects_its_versions() {
        let read = |s: &str| serde_json::from_str::<VersionPolicy>(s).unwrap();
        assert_eq!(read(r#"{"latest": 2}"#), VersionPolicy::Latest(2));
        assert_eq!(read(r#"{"all": true}"#), VersionPolicy::All(true));
        assert_eq!(
            read(r#"{"specific": [1, 3]}"#),
            VersionPolicy::Specific(vec![1, 3])
        );
        assert!(serde_json::from_str::<VersionPolicy>(r#"{"newest": 1}"#).is_err());
        let available = [1, 2, 5];
        assert_eq!(VersionPolicy::default().select(&available).unwrap(), [5]);
        assert_eq!(VersionPolicy::Latest(2).select(&available).unwrap(), [2, 5]);
        assert_eq!(
            VersionPolicy::Latest(9).select(&available).unwrap(),
            [1, 2, 5]
        );
        assert_eq!(
            VersionPolicy::All(true).select(&available).unwrap(),
            [1, 2, 5]
        );
        assert_eq!(
            VersionPolicy::Specific(vec![5, 1])
                .select(&available)
                .unwrap(),
            [1, 5]
        );
        let missing = VersionPolicy::Specific(vec![3])
            .select(&available)
            .unwrap_err();
        assert_eq!(
            missing,
            "the model has no version 3: its versions are 1, 2, 5"
        );
        for bad in [
            VersionPolicy::Latest(0),
            VersionPolicy::All(false),
            VersionPolicy::Specific(vec![]),
            VersionPolicy::Specific(vec![-1]),
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
        assert!(VersionPolicy::Specific(vec![0, 2]).check().is_ok());
    }
}
