//! The files deployments run from, each checked when it is made rather than at an
//! instance's first call: Cosmos scripts (inline or cloned with `git`), model layouts for
//! real model servers, and model artifacts read by the engine that will run them.

use std::path::{Path, PathBuf};

use kep_model_server::Engine;
use kep_model_server::artifact::Artifact;
use kep_model_server::framework::SignatureDef;
use kep_model_server::model::{Format, ModelError, TensorSpec};
use kep_model_server::versions::{self, VersionPolicy};

use super::Control;
use super::launch::{KEP_ENGINE, NATIVE};
use crate::ServingError;
use crate::deployment::{DeploymentSpec, Native};
use crate::store::ModelRow;
use kep_api::serving::DeploymentType;

/// A script file's name among the shared files: `scripts/<uuid>/serve.rhai`, the end of
/// its path under whichever node's serving folder made it.
fn script_name(path: &str) -> Option<String> {
    let parts: Vec<_> = Path::new(path).iter().rev().take(3).collect();
    match parts.as_slice() {
        [file, dir, scripts] if *scripts == "scripts" => Some(format!(
            "scripts/{}/{}",
            dir.to_string_lossy(),
            file.to_string_lossy()
        )),
        _ => None,
    }
}

impl Control {
    /// The spec with its files on this node, where instances run: a model or script made
    /// through another node is copied here first. A file no node has stays as it was named,
    /// and the instance that cannot find it says so.
    pub(super) async fn localized(&self, spec: &DeploymentSpec) -> DeploymentSpec {
        let mut spec = spec.clone();
        if let Some(model) = &mut spec.model {
            match self.model_file(&model.id).await {
                Ok(path) => model.path = path.to_string_lossy().into_owned(),
                Err(e) => tracing::warn!(model = %model.id, error = %e, "a model's file"),
            }
        }
        if let Some(script) = &mut spec.script_path
            && let Some(name) = script_name(script)
        {
            let here = self.root.join(&name);
            match self.files.fetch(&name, &here).await {
                Ok(true) => *script = here.to_string_lossy().into_owned(),
                Ok(false) => tracing::warn!(script = %name, "a script file is on no node"),
                Err(e) => tracing::warn!(script = %name, error = %e, "a script file"),
            }
        }
        spec
    }
}

/// How long a repository clone may take.
const CLONE_TIMEOUT_S: u64 = 120;

impl Control {
    /// The script file for a Cosmos deployment, checked: inline text is written under
    /// `serving/scripts`; a repository URL is cloned there with `git` and its `serve.rhai`
    /// is the script.
    pub(super) async fn script_file(&self, source: &str) -> Result<String, ServingError> {
        let dir = self.root.join("scripts").join(kep_core::secret::new_uuid());
        kep_core::private::dir_async(&dir).await?;
        let source = source.trim();
        let is_repository = ["https://", "http://", "git://", "ssh://", "file://", "git@"]
            .iter()
            .any(|p| source.starts_with(p))
            && !source.contains('\n');
        let fetched = if is_repository {
            clone_script(source, &dir.join("repository")).await
        } else {
            Ok(source.to_owned())
        };
        let checked =
            fetched.and_then(|text| kep_model_server::cosmos::Script::compile(&text).map(|_| text));
        match checked {
            Ok(text) => {
                let path = dir.join("serve.rhai");
                kep_core::private::write_async(&path, text.as_bytes()).await?;
                let path = path.to_string_lossy().into_owned();
                if let Some(name) = script_name(&path) {
                    self.files.publish(&name, Path::new(&path)).await?;
                }
                Ok(path)
            }
            Err(e) => {
                let _ = tokio::fs::remove_dir_all(&dir).await;
                Err(ServingError::field("script", e))
            }
        }
    }

    /// Lays the model out for the type's real server in a folder of its own and returns
    /// the server's argv; the server must be on the PATH now.
    pub(super) async fn native_layout(
        &self,
        kind: DeploymentType,
        row: &ModelRow,
        policy: &VersionPolicy,
    ) -> Result<Native, ServingError> {
        use kep_model_server::native;
        use kep_model_server::versions::Select as _;
        let program = match kind {
            DeploymentType::Triton => native::TRITONSERVER,
            DeploymentType::TensorflowServing => native::TENSORFLOW_MODEL_SERVER,
            _ => {
                return Err(ServingError::field(
                    "env",
                    format!(
                        "{KEP_ENGINE}={NATIVE} is for triton and tensorflow-serving deployments"
                    ),
                ));
            }
        };
        if native::on_path(program).is_none() {
            return Err(ServingError::field(
                "env",
                format!("{KEP_ENGINE}={NATIVE}: there is no {program} on kep's PATH"),
            ));
        }
        policy
            .select(&row.versions)
            .map_err(|e| ServingError::field("version_policy", e))?;
        let path = PathBuf::from(&row.path);
        let format = Format::stored(&row.format, &path).ok_or_else(|| {
            ServingError::Internal(anyhow::anyhow!("model {} has no format", row.name))
        })?;
        let signature = (row.inputs.clone(), row.outputs.clone());
        // The folder's parent is the deployment's own, as a cloned script's is.
        let dir = self
            .root
            .join("native")
            .join(kep_core::secret::new_uuid())
            .join("model");
        let (name, at, policy) = (row.name.to_string(), dir.clone(), policy.clone());
        let made = tokio::task::spawn_blocking(move || {
            let registered = native::Registered {
                name: &name,
                file: &path,
                format,
                signature: &signature,
                policy: &policy,
            };
            match kind {
                DeploymentType::Triton => native::triton(&at, &registered),
                _ => native::tf_serving(&at, &registered),
            }
            .map_err(|e| ServingError::field("model", e))
        })
        .await
        .map_err(|e| ServingError::Internal(e.into()))?;
        let dir = dir.to_string_lossy().into_owned();
        match made {
            Ok(argv) => Ok(Native { dir, argv }),
            Err(e) => {
                forget_workdir(&dir).await;
                Err(e)
            }
        }
    }
}

/// `git clone` of a script repository into `into`, and its `serve.rhai`; the error is the
/// script field's message.
async fn clone_script(source: &str, into: &Path) -> Result<String, String> {
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(CLONE_TIMEOUT_S),
        tokio::process::Command::new("git")
            .args(["clone", "--depth", "1", "--quiet", "--", source])
            .arg(into)
            .env("GIT_TERMINAL_PROMPT", "0")
            .output(),
    )
    .await;
    match out {
        Ok(Ok(o)) if o.status.success() => tokio::fs::read_to_string(into.join("serve.rhai"))
            .await
            .map_err(|e| format!("the repository has no serve.rhai at its root: {e}")),
        Ok(Ok(o)) => Err(format!(
            "git clone {source}: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Ok(Err(e)) => Err(format!("git clone {source}: {e}")),
        Err(_) => Err(format!(
            "git clone {source}: no answer within {CLONE_TIMEOUT_S} s"
        )),
    }
}

/// Removes the folder a script or a native layout was written in.
pub(super) async fn forget_workdir(path: &str) {
    if let Some(dir) = Path::new(path).parent() {
        let _ = tokio::fs::remove_dir_all(dir).await;
    }
}

/// What an upload's artifact is, as registered.
pub(super) struct Inspected {
    pub format: Format,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    pub versions: Vec<i64>,
    pub signatures: Option<Vec<SignatureDef>>,
}

/// Reads an uploaded artifact: a file no engine can read as a model is refused at upload,
/// and so is one whose format is not its framework's (CONTRACT §3): a frozen GraphDef or
/// a SavedModel is TensorFlow's, a TorchScript file PyTorch's. A SavedModel's every version
/// and a TorchScript module are loaded by their framework's runtime, which must be there.
pub(super) async fn inspect_model(
    path: PathBuf,
    framework: &str,
    declared: Option<Vec<TensorSpec>>,
) -> Result<Inspected, ServingError> {
    let file = |e: ModelError| ServingError::field("file", e.to_string());
    let read_path = path.clone();
    let kind = tokio::task::spawn_blocking(move || Artifact::of(&read_path))
        .await
        .map_err(|e| ServingError::Internal(e.into()))?
        .map_err(file)?;
    let framework_of = match kind {
        Artifact::Protobuf => None,
        Artifact::TorchScript => Some("pytorch"),
        Artifact::SavedModelTar | Artifact::SavedModelZip => Some("tensorflow"),
    };
    if let Some(own) = framework_of
        && own != framework
    {
        return Err(ServingError::field(
            "file",
            format!(
                "the file is {}, which is a {own} model's: framework {own}",
                describe(kind)
            ),
        ));
    }
    if kind != Artifact::TorchScript && declared.is_some() {
        return Err(ServingError::field(
            "inputs",
            "inputs are declared for a TorchScript file only: other formats record their own",
        ));
    }
    if kind == Artifact::Protobuf {
        let read = tokio::task::spawn_blocking(move || kep_model_server::model::inspect(&path))
            .await
            .map_err(|e| ServingError::Internal(e.into()))?;
        let ((inputs, outputs), format) = read.map_err(file)?;
        if format == Format::FrozenGraph && framework != "tensorflow" {
            return Err(ServingError::field(
                "file",
                "a TensorFlow frozen GraphDef is for tensorflow models; other frameworks are uploaded as ONNX exports, or PyTorch's as TorchScript",
            ));
        }
        return Ok(Inspected {
            format,
            inputs,
            outputs,
            versions: vec![1],
            signatures: None,
        });
    }
    if kind == Artifact::TorchScript && declared.is_none() {
        return Err(ServingError::field(
            "inputs",
            "a TorchScript file needs the part `inputs`: a JSON list of {name, datatype, shape}, as TorchScript records none",
        ));
    }
    let loaded = tokio::task::spawn_blocking(move || {
        versions::load(
            &path,
            Engine::Tract,
            &VersionPolicy::All(true),
            declared.as_deref(),
            versions::Runtime::default(),
        )
    })
    .await
    .map_err(|e| ServingError::Internal(e.into()))?
    .map_err(file)?;
    let latest = loaded
        .versions
        .last()
        .expect("a loaded model has a version");
    let signatures: Vec<SignatureDef> = (latest.signatures.iter())
        .map(|s| SignatureDef {
            name: s.name.clone(),
            method: (loaded.format == Format::SavedModel).then(|| s.method.clone()),
            inputs: s.model.inputs.clone(),
            outputs: s.model.outputs.clone(),
        })
        .collect();
    let default = &signatures[0];
    Ok(Inspected {
        format: loaded.format,
        inputs: default.inputs.clone(),
        outputs: default.outputs.clone(),
        versions: loaded.available.clone(),
        signatures: (loaded.format == Format::SavedModel).then_some(signatures),
    })
}

fn describe(kind: Artifact) -> &'static str {
    match kind {
        Artifact::TorchScript => "a TorchScript module",
        _ => "a SavedModel",
    }
}

/// Prepares the model as its instances will, in their engine: what the engine cannot run
/// (an unsupported operator, or ONNX Runtime missing) is refused when the deployment is
/// made, not at its first call; so is a `max_batch_size` (> 0) a version cannot take (a
/// 400 on `model_config`).
pub(super) async fn check_model(
    path: PathBuf,
    engine: Engine,
    policy: VersionPolicy,
    inputs: Option<Vec<TensorSpec>>,
    max_batch_size: u32,
) -> Result<(), ServingError> {
    let loaded = tokio::task::spawn_blocking(move || {
        versions::load(
            &path,
            engine,
            &policy,
            inputs.as_deref(),
            Default::default(),
        )
    })
    .await
    .map_err(|e| ServingError::Internal(e.into()))?
    .map_err(|e| ServingError::field("model", e.to_string()))?;
    if max_batch_size > 0 {
        for version in &loaded.versions {
            kep_model_server::batching::check(version.model(), max_batch_size as usize)
                .map_err(|e| ServingError::field("model_config", e.to_string()))?;
        }
    }
    Ok(())
}
