//! Models: uploaded artifacts, checked by the engine and registered with their inputs and
//! outputs.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures_util::{Stream, TryStreamExt as _};
use sha2::Digest as _;
use tokio::io::AsyncWriteExt as _;

use super::artifacts::inspect_model;
use super::{Control, rfc3339, validate};
use crate::ServingError;
use crate::ids::{ModelId, ModelName};
use crate::store::ModelRow;
use kep_api::serving::{Model, ModelSignature, ModelTensor};
use kep_model_server::model::TensorSpec;

/// Where uploaded artifacts are kept, one file per model named by its id.
pub(super) fn models_dir(root: &Path) -> PathBuf {
    root.join("models")
}

/// A model's file among the shared files (several nodes).
fn model_name(id: &ModelId) -> String {
    format!("models/{id}")
}

impl Control {
    /// The model's file on this node: one uploaded through another node is copied here
    /// first (several nodes).
    pub(super) async fn model_file(&self, id: &ModelId) -> Result<PathBuf, ServingError> {
        let path = models_dir(&self.root).join(id.as_str());
        if self.files.fetch(&model_name(id), &path).await? {
            Ok(path)
        } else {
            Err(ServingError::Internal(anyhow::anyhow!(
                "the file of model {id} is on no node"
            )))
        }
    }
}

/// A model upload under way: the file is streamed to `{id}.part` in the models folder,
/// counted and hashed as it comes, and becomes `{id}` when the model is registered. An
/// upload that fails leaves no file behind.
pub struct ModelUpload<'a> {
    control: &'a Control,
    id: ModelId,
    /// The file's size and SHA-256, once written.
    file: Option<(u64, String)>,
}

impl Control {
    pub fn model_upload(&self) -> ModelUpload<'_> {
        ModelUpload {
            control: self,
            id: ModelId::from(kep_core::secret::new_uuid()),
            file: None,
        }
    }

    pub async fn models(&self) -> Result<Vec<Model>, ServingError> {
        Ok(self.store.models().await?.iter().map(model_view).collect())
    }

    pub async fn model(&self, name: &ModelName) -> Result<Model, ServingError> {
        let row = self.store.model(name).await?;
        row.as_ref()
            .map(model_view)
            .ok_or_else(|| ServingError::NotFound(format!("no model {name}")))
    }

    pub async fn delete_model(&self, name: &ModelName) -> Result<(), ServingError> {
        if !self.store.delete_model(name).await? {
            return Err(ServingError::NotFound(format!("no model {name}")));
        }
        Ok(())
    }
}

impl ModelUpload<'_> {
    fn part_path(&self) -> PathBuf {
        models_dir(&self.control.root).join(format!("{}.part", self.id))
    }

    /// Writes the file; one over `serving.max_model_bytes` is refused as it arrives.
    pub async fn write_file(
        &mut self,
        chunks: impl Stream<Item = Result<Bytes, ServingError>>,
    ) -> Result<(), ServingError> {
        let max = self.control.settings.max_model_bytes;
        let mut chunks = std::pin::pin!(chunks);
        let mut out = kep_core::private::create_async(&self.part_path()).await?;
        let (mut size, mut hash) = (0u64, sha2::Sha256::new());
        while let Some(chunk) = chunks.try_next().await? {
            size += chunk.len() as u64;
            if size > max {
                return Err(ServingError::PayloadTooLarge(max));
            }
            hash.update(&chunk);
            out.write_all(&chunk).await?;
        }
        out.sync_all().await?;
        self.file = Some((size, hex::encode(hash.finalize())));
        Ok(())
    }

    /// Checks the upload's parts and its file, and registers the model.
    pub async fn finish(
        self,
        name: Option<String>,
        framework: Option<String>,
        inputs: Option<String>,
    ) -> Result<Model, ServingError> {
        let registered = self.register(name, framework, inputs).await;
        if registered.is_err() {
            self.discard().await;
        }
        registered
    }

    /// Removes what was written of an upload that went wrong.
    pub async fn discard(&self) {
        let _ = tokio::fs::remove_file(self.part_path()).await;
    }

    async fn register(
        &self,
        name: Option<String>,
        framework: Option<String>,
        inputs: Option<String>,
    ) -> Result<Model, ServingError> {
        let name = name.ok_or_else(|| ServingError::field("name", "missing part `name`"))?;
        let framework = framework
            .ok_or_else(|| ServingError::field("framework", "missing part `framework`"))?;
        let (size, sha256) = self
            .file
            .clone()
            .ok_or_else(|| ServingError::field("file", "missing part `file`"))?;
        if size == 0 {
            return Err(ServingError::field("file", "the model file is empty"));
        }
        validate::model(&name, &framework)?;
        let declared = inputs.as_deref().map(declared_inputs).transpose()?;
        let part = self.part_path();
        let inspected = inspect_model(part.clone(), &framework, declared).await?;
        let path = models_dir(&self.control.root).join(self.id.as_str());
        tokio::fs::rename(&part, &path).await?;
        // Every node's before the model is registered.
        if let Err(e) = self
            .control
            .files
            .publish(&model_name(&self.id), &path)
            .await
        {
            let _ = tokio::fs::remove_file(&path).await;
            return Err(e.into());
        }
        let row = ModelRow {
            id: self.id.clone(),
            name: ModelName::from(name),
            framework,
            path: path.to_string_lossy().into_owned(),
            size: size as i64,
            sha256,
            created_at: self.control.now_unix(),
            inputs: inspected.inputs,
            outputs: inspected.outputs,
            format: inspected.format.name().to_owned(),
            versions: inspected.versions,
            signatures: inspected.signatures,
        };
        if !self.control.store.insert_model(&row).await? {
            let _ = tokio::fs::remove_file(&row.path).await;
            let _ = self.control.files.remove(&model_name(&self.id)).await;
            return Err(ServingError::Conflict(format!(
                "a model named {} exists",
                row.name
            )));
        }
        Ok(model_view(&row))
    }
}

/// The `inputs` part: a TorchScript module's inputs, `[{name, datatype, shape}]` with
/// KServe v2 datatype names (TorchScript records none, as Triton's pytorch_libtorch needs
/// them in its config).
fn declared_inputs(text: &str) -> Result<Vec<TensorSpec>, ServingError> {
    let specs: Vec<TensorSpec> = serde_json::from_str(text).map_err(|e| {
        ServingError::field(
            "inputs",
            format!("a JSON list of {{name, datatype, shape}} with KServe v2 datatypes: {e}"),
        )
    })?;
    if specs.is_empty() {
        return Err(ServingError::field("inputs", "at least one input"));
    }
    if let Some(bad) = specs.iter().find(|s| s.shape.iter().any(|d| *d < -1)) {
        return Err(ServingError::field(
            "inputs",
            format!(
                "{}: a dimension is a size, or -1 for a variable one",
                bad.name
            ),
        ));
    }
    Ok(specs)
}

fn model_view(row: &ModelRow) -> Model {
    let tensors = |specs: &[TensorSpec]| {
        (specs.iter())
            .map(|t| ModelTensor {
                name: t.name.clone(),
                datatype: t.datatype.name().to_owned(),
                shape: t.shape.clone(),
            })
            .collect()
    };
    Model {
        name: row.name.to_string(),
        framework: row.framework.clone(),
        size: row.size as u64,
        sha256: row.sha256.clone(),
        created_at: rfc3339(row.created_at),
        inputs: tensors(&row.inputs),
        outputs: tensors(&row.outputs),
        // A model stored before formats were kept is told by its file's bytes.
        format: kep_model_server::model::Format::stored(&row.format, Path::new(&row.path))
            .map_or_else(|| row.format.clone(), |f| f.name().to_owned()),
        versions: row.versions.clone(),
        signatures: row.signatures.as_ref().map(|signatures| {
            (signatures.iter())
                .map(|s| ModelSignature {
                    name: s.name.clone(),
                    method: s.method.clone(),
                    inputs: tensors(&s.inputs),
                    outputs: tensors(&s.outputs),
                })
                .collect()
        }),
    }
}
