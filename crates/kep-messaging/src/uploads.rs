//! Uploads: RCS images and MMS images, checked by their bytes (CONTRACT §4), kept in the
//! data dir (and, with several nodes, in the database for every node) until they expire.

use std::path::PathBuf;
use std::sync::Arc;

use kep_core::cluster::SharedFiles;
use kep_core::secret::random_token;

use crate::MessagingError;
use crate::ids::{ClientId, ContentGroupId, FileId};
use crate::kinds::UploadKind;
use crate::store::{Store, UploadRow};
use kep_core::clock::Clock;

pub const RCS_MAX_BYTES: usize = 1024 * 1024;
pub const MMS_MAX_FILES: usize = 3;
pub const MMS_MAX_TOTAL_BYTES: usize = 200 * 1024;

const JPEG: &[u8] = &[0xFF, 0xD8, 0xFF];
const PNG: &[u8] = &[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];

fn is_jpeg(bytes: &[u8]) -> bool {
    bytes.starts_with(JPEG)
}

fn is_png(bytes: &[u8]) -> bool {
    bytes.starts_with(PNG)
}

pub struct Uploads {
    pub store: Arc<dyn Store>,
    pub clock: Clock,
    pub dir: PathBuf,
    /// The files for every node (several nodes).
    pub shared: SharedFiles,
    pub ttl_ms: i64,
}

/// An MMS file is a JPEG, by its bytes; checked as each part is read, before the next.
pub fn check_mms_file(name: &str, bytes: &[u8]) -> Result<(), MessagingError> {
    if bytes.is_empty() || !is_jpeg(bytes) {
        return Err(MessagingError::file(
            name,
            "every file must be a JPEG image (by its bytes)",
        ));
    }
    Ok(())
}

impl Uploads {
    async fn keep(
        &self,
        client_id: &ClientId,
        kind: UploadKind,
        group: Option<&ContentGroupId>,
        description: Option<&str>,
        bytes: &[u8],
    ) -> Result<UploadRow, MessagingError> {
        let now = self.clock.unix_ms();
        let row = UploadRow {
            file_id: FileId::from(random_token(12).replace(['-', '_'], "0")),
            client_id: client_id.clone(),
            kind,
            content_group_id: group.cloned(),
            description: description.map(str::to_owned),
            size: i64::try_from(bytes.len()).unwrap_or(i64::MAX),
            created_at: now,
            expires_at: now.saturating_add(self.ttl_ms),
        };
        kep_core::private::dir_async(&self.dir)
            .await
            .map_err(|e| MessagingError::Internal(e.into()))?;
        let path = self.dir.join(row.file_id.as_str());
        kep_core::private::write_async(&path, bytes)
            .await
            .map_err(|e| MessagingError::Internal(e.into()))?;
        self.shared
            .publish(row.file_id.as_str(), &path)
            .await
            .map_err(|e| MessagingError::Internal(e.into()))?;
        Ok(row)
    }

    /// `POST /v2/upload/rcs`: the part `image` (JPEG or PNG, at most 1 MB, read by the
    /// handler up to that) and `description`.
    pub async fn rcs(
        &self,
        client_id: &ClientId,
        image: Option<Vec<u8>>,
        description: Option<String>,
    ) -> Result<UploadRow, MessagingError> {
        let image = image.ok_or_else(|| MessagingError::file("image", "required"))?;
        if image.is_empty() {
            return Err(MessagingError::file("image", "empty"));
        }
        if !(is_jpeg(&image) || is_png(&image)) {
            return Err(MessagingError::file(
                "image",
                "must be a JPEG or PNG image (by its bytes)",
            ));
        }
        let description = description
            .filter(|d| !d.trim().is_empty())
            .ok_or_else(|| MessagingError::invalid("description", "required"))?;
        let row = self
            .keep(client_id, UploadKind::Rcs, None, Some(&description), &image)
            .await?;
        self.store
            .insert_uploads(std::slice::from_ref(&row))
            .await?;
        Ok(row)
    }

    /// `POST /v2/upload/message/mms/files`: the parts `files` (or `images`), at most 3
    /// JPEGs and 200 KB together, each checked by [`check_mms_file`] as the handler read
    /// it; one content group.
    pub async fn mms(
        &self,
        client_id: &ClientId,
        files: Vec<Vec<u8>>,
    ) -> Result<ContentGroupId, MessagingError> {
        if files.is_empty() {
            return Err(MessagingError::file("files", "required"));
        }
        let group = ContentGroupId::from(random_token(12).replace(['-', '_'], "0"));
        let mut rows = Vec::new();
        for bytes in &files {
            rows.push(
                self.keep(client_id, UploadKind::Mms, Some(&group), None, bytes)
                    .await?,
            );
        }
        self.store.insert_uploads(&rows).await?;
        Ok(group)
    }

    /// Whether the client has an unexpired RCS file `file_id`.
    pub async fn rcs_file_usable(
        &self,
        client_id: &ClientId,
        file_id: &FileId,
    ) -> sqlx::Result<bool> {
        self.store
            .rcs_file_usable(client_id, file_id, self.clock.unix_ms())
            .await
    }

    /// Whether the client has an MMS content group whose files are all unexpired.
    pub async fn mms_group_usable(
        &self,
        client_id: &ClientId,
        group: &ContentGroupId,
    ) -> sqlx::Result<bool> {
        self.store
            .mms_group_usable(client_id, group, self.clock.unix_ms())
            .await
    }

    /// Removes expired uploads and their files, every `every`.
    pub async fn sweep(self: std::sync::Arc<Self>, every: std::time::Duration) {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            match self.store.take_expired_uploads(self.clock.unix_ms()).await {
                Ok(ids) => {
                    for id in ids {
                        let _ = tokio::fs::remove_file(self.dir.join(id.as_str())).await;
                        let _ = self.shared.remove(id.as_str()).await;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "sweeping expired uploads"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_told_by_their_bytes() {
        assert!(is_jpeg(&[0xFF, 0xD8, 0xFF, 0xE0]));
        assert!(is_png(b"\x89PNG\r\n\x1a\n...."));
        assert!(!is_jpeg(b"\x89PNG\r\n\x1a\n"));
        assert!(!is_png(b"hello.png"));
    }
}
