//! An HTTP/2 connection to a gRPC instance, on the `h2` crate itself, that every call to the
//! instance from one gateway worker shares (each worker has its own). hyper's client costs
//! a call a channel to its dispatch task, a task of its own for the answer, and, for a
//! request body, a second write: the body waits for the stream's flow-control capacity,
//! which comes only once the connection task has opened the stream and written its HEADERS. Here the caller queues the HEADERS and the body's
//! first bytes together, and the connection task writes them in one go.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll, ready};

use axum::http::uri::{Authority, Scheme};
use axum::http::{HeaderMap, Uri};
use bytes::Bytes;
use h2::client::SendRequest;
use h2::{RecvStream, SendStream};
use http_body::{Body, Frame};
use http_body_util::BodyExt as _;
use hyper::{Request, Response};
use tokio::net::TcpStream;

use super::body::ProxyBody;
use crate::error::SendError;

/// The instance's flow-control windows and frames, as the model server sets its own: a
/// batch of 32 images is 19 MB, which 64 KiB windows would send a window at a time.
const WINDOW_BYTES: u32 = 16 * 1024 * 1024;
pub const MAX_FRAME_BYTES: u32 = 1024 * 1024;

/// A connection to one instance, made on the first call and again after it ends.
pub struct Http2Conn {
    authority: Authority,
    current: Mutex<Option<SendRequest<Bytes>>>,
    /// Callers that find no connection wait for the one being made, not make one each.
    connecting: tokio::sync::Mutex<()>,
}

impl Http2Conn {
    pub fn new(addr: SocketAddr) -> Self {
        Http2Conn {
            authority: Authority::try_from(addr.to_string()).expect("an address is an authority"),
            current: Mutex::default(),
            connecting: tokio::sync::Mutex::default(),
        }
    }

    /// Sends `req` (a path without scheme or authority) and waits for the answer's headers;
    /// the body goes on being sent by a task of its own if it is not all there yet.
    pub async fn send(
        &self,
        req: Request<ProxyBody>,
        connect: impl AsyncFnOnce() -> Result<TcpStream, SendError>,
    ) -> Result<Response<Http2Body>, SendError> {
        let mut tx = self.ready(connect).await?;
        let (mut parts, body) = req.into_parts();
        parts.uri = absolute(&parts.uri, &self.authority);
        let eos = body.is_end_stream();
        let (answer, stream) = tx
            .send_request(Request::from_parts(parts, ()), eos)
            .map_err(|e| SendError::http(&e))?;
        if !eos {
            let mut pump = Box::pin(pump(body, stream));
            // A held body is all there: it is queued behind the HEADERS now, not by a task.
            if poll_fn(|cx| Poll::Ready(pump.as_mut().poll(cx)))
                .await
                .is_pending()
            {
                tokio::spawn(pump);
            }
        }
        let res = answer.await.map_err(|e| {
            let mut err = SendError::http(&e);
            // The instance said it did not take the stream up (it is going away, or full):
            // the call may go to another instance as one that never connected does.
            err.connect =
                (e.is_go_away() && e.is_remote()) || e.reason() == Some(h2::Reason::REFUSED_STREAM);
            err
        })?;
        let (parts, recv) = res.into_parts();
        Ok(Response::from_parts(
            parts,
            Http2Body {
                recv,
                data_done: false,
                done: false,
            },
        ))
    }

    /// A connection ready for one more stream: the current one, or a new one when there is
    /// none or it has ended (nothing was sent on it, so the call is not lost).
    async fn ready(
        &self,
        connect: impl AsyncFnOnce() -> Result<TcpStream, SendError>,
    ) -> Result<SendRequest<Bytes>, SendError> {
        if let Some(tx) = self.live().await {
            return Ok(tx);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(tx) = self.live().await {
            return Ok(tx);
        }
        let stream = connect().await?;
        let (tx, connection) = h2::client::Builder::new()
            .initial_window_size(WINDOW_BYTES)
            .initial_connection_window_size(WINDOW_BYTES)
            .max_frame_size(MAX_FRAME_BYTES)
            .handshake(stream)
            .await
            .map_err(|e| SendError {
                connect: true,
                cause: format!("HTTP/2 handshake: {e}"),
            })?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "an instance's HTTP/2 connection ended");
            }
        });
        *self.current.lock().expect("never poisoned") = Some(tx.clone());
        tx.ready().await.map_err(|e| SendError {
            connect: true,
            cause: format!("HTTP/2: {e}"),
        })
    }

    /// The current connection, once it can take a stream; `None` when there is none or it
    /// has ended.
    async fn live(&self) -> Option<SendRequest<Bytes>> {
        let current = self.current.lock().expect("never poisoned").clone()?;
        current.ready().await.ok()
    }
}

/// `path` with the instance as its authority: HTTP/2 sends both as pseudo-headers.
fn absolute(path: &Uri, authority: &Authority) -> Uri {
    let mut uri = axum::http::uri::Parts::default();
    uri.scheme = Some(Scheme::HTTP);
    uri.authority = Some(authority.clone());
    uri.path_and_query = path.path_and_query().cloned();
    Uri::from_parts(uri).expect("scheme, authority and path make a URI")
}

/// Sends `body` on `stream`: each chunk as it comes, the next one read only once the
/// instance has room for more, so a body never waits in memory beyond one chunk.
async fn pump(mut body: ProxyBody, mut stream: SendStream<Bytes>) {
    loop {
        let Some(frame) = body.frame().await else {
            let _ = stream.send_data(Bytes::new(), true);
            return;
        };
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => {
                tracing::debug!(error = %e, "a request body failed: the stream is reset");
                stream.send_reset(h2::Reason::CANCEL);
                return;
            }
        };
        let frame = match frame.into_data() {
            Ok(data) => {
                let eos = body.is_end_stream();
                if stream.send_data(data, eos).is_err() || eos {
                    return;
                }
                continue_when_room(&mut stream).await;
                continue;
            }
            Err(frame) => frame,
        };
        if let Ok(trailers) = frame.into_trailers() {
            let _ = stream.send_trailers(trailers);
            return;
        }
    }
}

/// Waits until the stream can send at least one more byte (or has ended).
async fn continue_when_room(stream: &mut SendStream<Bytes>) {
    stream.reserve_capacity(1);
    while stream.capacity() == 0 {
        match poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(Ok(0)) => {}
            Some(Ok(_)) => break,
            Some(Err(_)) | None => return,
        }
    }
}

/// An instance's answer body: its data, then its trailers (gRPC's status).
pub struct Http2Body {
    recv: RecvStream,
    data_done: bool,
    done: bool,
}

impl Body for Http2Body {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if !self.data_done {
            match ready!(self.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    // Read: the instance may send as much again.
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => self.data_done = true,
            }
        }
        let trailers: Option<HeaderMap> = ready!(self.recv.poll_trailers(cx))?;
        self.done = true;
        Poll::Ready(trailers.map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.recv.is_end_stream()
    }
}
