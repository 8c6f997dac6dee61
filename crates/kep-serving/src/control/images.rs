//! Images: a name and a command run as a local process, or an OCI image in the container
//! engine's local store, registered by reference or loaded from an uploaded archive
//! (CONTRACT §3 "Container images"). Deleting one deletes kep's registration only: the
//! engine keeps the image, which the user may use elsewhere and deployments made from it
//! still run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use futures_util::{Stream, StreamExt as _};

use super::validate::ImageSpec;
use super::{Control, rfc3339, validate};
use crate::ServingError;
use crate::engine::EngineImage;
use crate::ids::{ImageId, ImageName};
use crate::kinds::ImageSource;
use crate::store::ImageRow;
use kep_api::serving::{Image, ImageRequest};

/// A failure reading an uploaded archive, as the engine's client takes it.
type BodyError = Box<dyn std::error::Error + Send + Sync>;

impl Control {
    pub async fn create_image(&self, req: ImageRequest) -> Result<Image, ServingError> {
        let row = match validate::image(&req)? {
            ImageSpec::Command(command) => ImageRow {
                command: Some(command),
                ..self.new_image(req.name)
            },
            ImageSpec::Reference(reference) => {
                let found = self.engine.inspect(&reference).await?.ok_or_else(|| {
                    ServingError::field(
                        "reference",
                        format!(
                            "{reference} is not in the container engine's store (images are never pulled)"
                        ),
                    )
                })?;
                // The body is a few bytes: the image's size is a property of the reference.
                let max = self.settings.max_model_bytes;
                if found.size > max {
                    return Err(ServingError::field(
                        "reference",
                        format!(
                            "{reference} is {} bytes, over serving.max_model_bytes ({max})",
                            found.size
                        ),
                    ));
                }
                self.engine_image(req.name, reference, found, ImageSource::Reference)
            }
        };
        self.register(row).await
    }

    /// Streams an uploaded image archive to the engine and registers what it loaded as
    /// `name`. An archive over `serving.max_model_bytes` is refused as it arrives; on any
    /// failure nothing is registered.
    pub async fn load_image_archive<S, E>(
        &self,
        name: String,
        length: Option<u64>,
        archive: S,
    ) -> Result<Image, ServingError>
    where
        S: Stream<Item = Result<Bytes, E>> + Send + 'static,
        E: Into<BodyError> + 'static,
    {
        validate::check_name("name", &name)?;
        let max = self.settings.max_model_bytes;
        if length.is_some_and(|n| n > max) {
            return Err(ServingError::PayloadTooLarge(max));
        }
        // Checked first so a taken name costs no upload; the insert checks again.
        if self
            .store
            .image(&ImageName::from(name.as_str()))
            .await?
            .is_some()
        {
            return Err(taken(&name));
        }
        let over = Arc::new(AtomicBool::new(false));
        let mut seen = 0u64;
        let limited = archive.map({
            let over = Arc::clone(&over);
            move |chunk| -> Result<Bytes, BodyError> {
                let chunk = chunk.map_err(Into::into)?;
                seen += chunk.len() as u64;
                if seen > max {
                    over.store(true, Ordering::Relaxed);
                    return Err(format!("the archive is over {max} bytes").into());
                }
                Ok(chunk)
            }
        });
        let loaded = self.engine.load(limited).await;
        if over.load(Ordering::Relaxed) {
            return Err(ServingError::PayloadTooLarge(max));
        }
        let reference = loaded?;
        let found = self.engine.inspect(&reference).await?.ok_or_else(|| {
            ServingError::Internal(anyhow::anyhow!(
                "the container engine loaded {reference} but has no such image"
            ))
        })?;
        let row = self.engine_image(name, reference, found, ImageSource::Archive);
        self.register(row).await
    }

    pub async fn images(&self) -> Result<Vec<Image>, ServingError> {
        Ok(self.store.images().await?.iter().map(image_view).collect())
    }

    pub async fn image(&self, name: &ImageName) -> Result<Image, ServingError> {
        let row = self.store.image(name).await?;
        row.as_ref()
            .map(image_view)
            .ok_or_else(|| ServingError::NotFound(format!("no image {name}")))
    }

    pub async fn delete_image(&self, name: &ImageName) -> Result<(), ServingError> {
        if !self.store.delete_image(name).await? {
            return Err(ServingError::NotFound(format!("no image {name}")));
        }
        Ok(())
    }

    /// A row of neither form yet.
    fn new_image(&self, name: String) -> ImageRow {
        ImageRow {
            id: ImageId::from(kep_core::secret::new_uuid()),
            name: ImageName::from(name),
            command: None,
            reference: None,
            engine_id: None,
            size: None,
            source: None,
            created_at: self.now_unix(),
        }
    }

    /// An engine image's row: the id pins what the reference named at registration.
    fn engine_image(
        &self,
        name: String,
        reference: String,
        found: EngineImage,
        source: ImageSource,
    ) -> ImageRow {
        ImageRow {
            reference: Some(reference),
            engine_id: Some(found.id),
            size: Some(i64::try_from(found.size).unwrap_or(i64::MAX)),
            source: Some(source),
            ..self.new_image(name)
        }
    }

    async fn register(&self, row: ImageRow) -> Result<Image, ServingError> {
        if !self.store.insert_image(&row).await? {
            return Err(taken(row.name.as_str()));
        }
        Ok(image_view(&row))
    }
}

fn taken(name: &str) -> ServingError {
    ServingError::Conflict(format!("an image named {name} exists"))
}

fn image_view(row: &ImageRow) -> Image {
    Image {
        name: row.name.to_string(),
        command: row.command.clone(),
        reference: row.reference.clone(),
        image_id: row.engine_id.clone(),
        size_bytes: row.size.map(|s| s.max(0) as u64),
        source: row.source.map(ImageSource::to_api),
        created_at: rfc3339(row.created_at),
    }
}
