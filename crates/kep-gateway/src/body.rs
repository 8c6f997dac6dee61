//! Request bodies as the gateway holds them before proxying (as nginx's request buffering
//! does): in memory up to the client body buffer size, spooled to a file past it, refused
//! past the proxy body size. A held body can be sent to several instances (mirroring).

use std::path::Path;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, StreamBody};
use tokio::io::AsyncWriteExt as _;

use crate::GatewayError;

pub type ProxyBody = UnsyncBoxBody<Bytes, std::io::Error>;

pub enum Held {
    Empty,
    /// The chunks as they came, sent as they are: joined, they were copied once more (9 %
    /// of the gateway's time for a 602 KB image).
    Memory {
        chunks: Vec<Bytes>,
        len: u64,
    },
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
                    kep_core::private::dir(spool)?;
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
            None => Held::Memory { chunks, len },
        })
    }

    pub fn len(&self) -> u64 {
        match self {
            Held::Empty => 0,
            Held::Memory { len, .. } | Held::Disk { len, .. } => *len,
        }
    }

    /// A body that sends the held bytes once; call again for each instance.
    pub fn body(&self) -> std::io::Result<ProxyBody> {
        Ok(match self {
            Held::Empty => Empty::new().map_err(|never| match never {}).boxed_unsync(),
            Held::Memory { chunks, len } => HeldChunks {
                chunks: chunks.clone().into_iter(),
                left: *len,
            }
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

/// Held chunks sent in turn, their length known: a single one, a small call's, goes out
/// with its head in one write (the gateway's HTTP/2 connections, hyper's HTTP/1.1).
struct HeldChunks {
    chunks: std::vec::IntoIter<Bytes>,
    left: u64,
}

impl http_body::Body for HeldChunks {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        let chunk = self.chunks.next();
        if let Some(chunk) = &chunk {
            self.left -= chunk.len() as u64;
        }
        std::task::Poll::Ready(chunk.map(|c| Ok(http_body::Frame::data(c))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.left)
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
        // Two chunks, sent in turn.
        let held = hold(40, None, dir.path()).await.unwrap();
        assert!(matches!(held, Held::Memory { len: 40, .. }));
        let body = held.body().unwrap();
        assert_eq!(http_body::Body::size_hint(&body).exact(), Some(40));
        assert_eq!(body.collect().await.unwrap().to_bytes(), vec![7u8; 40]);
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
