//! Request bodies as the gateway holds them before proxying (as nginx's request buffering
//! does): in memory up to the client body buffer size, spooled to a file past it, refused
//! past the proxy body size. A held body can be sent to several instances (mirroring).

use std::path::Path;

use bytes::{Bytes, BytesMut};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use tokio::io::AsyncWriteExt as _;

use crate::GatewayError;

pub type ProxyBody = UnsyncBoxBody<Bytes, std::io::Error>;

pub enum Held {
    Empty,
    Memory(Bytes),
    Disk {
        file: tempfile::NamedTempFile,
        len: u64,
    },
}

pub struct BodyLimits {
    pub max_body: u64,
    pub buffer: u64,
}

impl Held {
    /// Reads `body` whole, refusing it once it passes `limits.max_body`.
    pub async fn read(
        body: axum::body::Body,
        declared: Option<u64>,
        limits: &BodyLimits,
        spool: &Path,
    ) -> Result<Held, GatewayError> {
        if declared.is_some_and(|n| n > limits.max_body) {
            return Err(GatewayError::PayloadTooLarge(limits.max_body));
        }
        if http_body::Body::is_end_stream(&body) || declared == Some(0) {
            return Ok(Held::Empty);
        }
        let mut stream = body.into_data_stream();
        // Chunks are kept as they come and joined once at the end, where their length is
        // known: a body of unknown length (gRPC's) grown by doubling was copied about twice
        // more (28 % of the gateway's time for a 19 MB call).
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut disk: Option<(tempfile::NamedTempFile, tokio::fs::File)> = None;
        let mut len: u64 = 0;
        use futures_util::StreamExt as _;
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| GatewayError::BadRequest(format!("reading the body: {e}")))?;
            len += chunk.len() as u64;
            if len > limits.max_body {
                return Err(GatewayError::PayloadTooLarge(limits.max_body));
            }
            match &mut disk {
                Some((_, file)) => file.write_all(&chunk).await?,
                None if len > limits.buffer => {
                    // Past the buffer: what came so far and the rest go to a spool file.
                    std::fs::create_dir_all(spool)?;
                    let named = tempfile::NamedTempFile::new_in(spool)?;
                    let mut file = tokio::fs::File::from_std(named.reopen()?);
                    for held in chunks.drain(..) {
                        file.write_all(&held).await?;
                    }
                    file.write_all(&chunk).await?;
                    disk = Some((named, file));
                }
                None => chunks.push(chunk),
            }
        }
        Ok(match disk {
            Some((file, mut writer)) => {
                writer.flush().await?;
                Held::Disk { file, len }
            }
            None if len == 0 => Held::Empty,
            None if chunks.len() == 1 => Held::Memory(chunks.pop().expect("one chunk")),
            None => {
                let mut joined = BytesMut::with_capacity(len as usize);
                for chunk in chunks {
                    joined.extend_from_slice(&chunk);
                }
                Held::Memory(joined.freeze())
            }
        })
    }

    pub fn len(&self) -> u64 {
        match self {
            Held::Empty => 0,
            Held::Memory(b) => b.len() as u64,
            Held::Disk { len, .. } => *len,
        }
    }

    /// A body that sends the held bytes once; call again for each instance.
    pub fn body(&self) -> std::io::Result<ProxyBody> {
        Ok(match self {
            Held::Empty => Empty::new().map_err(|never| match never {}).boxed_unsync(),
            Held::Memory(b) => Full::new(b.clone())
                .map_err(|never| match never {})
                .boxed_unsync(),
            Held::Disk { file, .. } => {
                let reader = tokio::fs::File::from_std(file.reopen()?);
                let stream = tokio_util::io::ReaderStream::with_capacity(reader, 256 * 1024);
                use futures_util::StreamExt as _;
                BodyExt::boxed_unsync(StreamBody::new(
                    stream.map(|r| r.map(http_body::Frame::data)),
                ))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn hold(len: usize, declared: Option<u64>, dir: &Path) -> Result<Held, GatewayError> {
        let limits = BodyLimits {
            max_body: 100,
            buffer: 40,
        };
        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from(vec![7u8; len / 2])),
            Ok(Bytes::from(vec![7u8; len - len / 2])),
        ];
        let body = axum::body::Body::from_stream(futures_util::stream::iter(chunks));
        Held::read(body, declared, &limits, dir).await
    }

    #[tokio::test]
    async fn memory_up_to_the_buffer_disk_past_it_refused_past_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        // Two chunks, joined.
        assert!(
            matches!(hold(40, None, dir.path()).await, Ok(Held::Memory(b)) if b == vec![7u8; 40])
        );
        match hold(41, None, dir.path()).await {
            Ok(held @ Held::Disk { .. }) => {
                assert_eq!(held.len(), 41);
                let bytes = held.body().unwrap().collect().await.unwrap().to_bytes();
                assert_eq!(bytes, vec![7u8; 41]);
            }
            _ => panic!("41 bytes are spooled"),
        }
        assert!(matches!(
            hold(100, None, dir.path()).await,
            Ok(Held::Disk { len: 100, .. })
        ));
        assert!(matches!(
            hold(101, None, dir.path()).await,
            Err(GatewayError::PayloadTooLarge(100))
        ));
        // A declared length over the limit is refused before anything is read.
        assert!(matches!(
            hold(10, Some(101), dir.path()).await,
            Err(GatewayError::PayloadTooLarge(100))
        ));
        // Spool files are gone once their bodies are.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
