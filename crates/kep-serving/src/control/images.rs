//! Images: the local stand-in for registered container images, a name and a command.

use super::{Control, rfc3339, validate};
use crate::ServingError;
use crate::ids::{ImageId, ImageName};
use crate::store::ImageRow;
use kep_api::serving::{Image, ImageRequest};

impl Control {
    pub async fn create_image(&self, req: ImageRequest) -> Result<Image, ServingError> {
        let command = validate::image(&req)?;
        let row = ImageRow {
            id: ImageId::from(kep_core::secret::new_uuid()),
            name: ImageName::from(req.name),
            command,
            created_at: self.now_unix(),
        };
        if !self.store.insert_image(&row).await? {
            return Err(ServingError::Conflict(format!(
                "an image named {} exists",
                row.name
            )));
        }
        Ok(image_view(&row))
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
}

fn image_view(row: &ImageRow) -> Image {
    Image {
        name: row.name.to_string(),
        command: row.command.clone(),
        created_at: rfc3339(row.created_at),
    }
}
