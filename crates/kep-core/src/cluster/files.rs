//! Files every node reads (CONTRACT §5). A service keeps its files (uploads, DRM releases,
//! model artifacts) in its data dir; with several nodes each file is also kept in the
//! database, as chunks of [`CHUNK`] bytes in `kep_cluster.file_chunks`, written and read a
//! chunk at a time (never whole in memory). A node that lacks a file copies it into its
//! own data dir before it uses it. On a node of its own there is nothing to share.

use std::path::Path;
use std::sync::Arc;

use sqlx::PgPool;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::Cluster;

/// The size of a stored chunk: large enough that a file of gigabytes is a few thousand
/// rows, small enough for one row's round trip.
pub const CHUNK: usize = 1024 * 1024;

/// One service's shared files.
#[derive(Clone)]
pub struct SharedFiles(Option<(PgPool, Arc<str>)>);

impl Cluster {
    /// The files of `bucket` (a service's name), shared where there are several nodes.
    pub fn files(&self, bucket: &str) -> SharedFiles {
        SharedFiles(
            self.0
                .as_ref()
                .map(|s| (s.files.clone(), Arc::from(bucket))),
        )
    }
}

fn other(e: sqlx::Error) -> std::io::Error {
    std::io::Error::other(e)
}

impl SharedFiles {
    /// Keeps the file at `path` as `name` for every node (replacing what was), in one
    /// transaction: the other nodes see all of it or nothing.
    pub async fn publish(&self, name: &str, path: &Path) -> std::io::Result<()> {
        let Some((pool, bucket)) = &self.0 else {
            return Ok(());
        };
        let mut file = tokio::fs::File::open(path).await?;
        let mut tx = pool.begin().await.map_err(other)?;
        sqlx::query("DELETE FROM file_chunks WHERE bucket = $1 AND name = $2")
            .bind(&**bucket)
            .bind(name)
            .execute(&mut *tx)
            .await
            .map_err(other)?;
        let mut chunk = vec![0u8; CHUNK];
        for seq in 0i32.. {
            let filled = fill(&mut file, &mut chunk).await?;
            if filled == 0 && seq > 0 {
                break;
            }
            sqlx::query(
                "INSERT INTO file_chunks (bucket, name, seq, data) VALUES ($1, $2, $3, $4)",
            )
            .bind(&**bucket)
            .bind(name)
            .bind(seq)
            .bind(&chunk[..filled])
            .execute(&mut *tx)
            .await
            .map_err(other)?;
            if filled < CHUNK {
                break;
            }
        }
        tx.commit().await.map_err(other)
    }

    /// Makes sure the file `name` is at `path`: there already, or copied there from the
    /// database (through a `.part` file, renamed once whole). False if no node kept it.
    pub async fn fetch(&self, name: &str, path: &Path) -> std::io::Result<bool> {
        if tokio::fs::try_exists(path).await? {
            return Ok(true);
        }
        let Some((pool, bucket)) = &self.0 else {
            return Ok(false);
        };
        let part = path.with_extension("part-shared");
        if let Some(dir) = path.parent() {
            crate::private::dir_async(dir).await?;
        }
        let mut out = crate::private::create_async(&part).await?;
        let mut seq = 0i32;
        loop {
            let data: Option<Vec<u8>> = sqlx::query_scalar(
                "SELECT data FROM file_chunks WHERE bucket = $1 AND name = $2 AND seq = $3",
            )
            .bind(&**bucket)
            .bind(name)
            .bind(seq)
            .fetch_optional(pool)
            .await
            .map_err(other)?;
            let Some(data) = data else { break };
            out.write_all(&data).await?;
            seq += 1;
        }
        if seq == 0 {
            drop(out);
            tokio::fs::remove_file(&part).await?;
            return Ok(false);
        }
        out.sync_all().await?;
        tokio::fs::rename(&part, path).await?;
        Ok(true)
    }

    /// Forgets the file `name` on every node (each removes its own copy itself).
    pub async fn remove(&self, name: &str) -> std::io::Result<()> {
        let Some((pool, bucket)) = &self.0 else {
            return Ok(());
        };
        sqlx::query("DELETE FROM file_chunks WHERE bucket = $1 AND name = $2")
            .bind(&**bucket)
            .bind(name)
            .execute(pool)
            .await
            .map_err(other)?;
        Ok(())
    }
}

/// Reads until `buf` is full or the file ends; how much it read.
async fn fill(file: &mut tokio::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let n = file.read(&mut buf[filled..]).await?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    Ok(filled)
}
