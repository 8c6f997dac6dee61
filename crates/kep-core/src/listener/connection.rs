//! One connection: the front's while it serves it, then hyper's with the router; closed
//! lingering, as nginx closes.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;
use tower::Service as _;
use tower_http::timeout::TimeoutBody;

use super::accept::{Acceptor, Opened};
use super::body::{BodyMemory, Tracked};
use super::front::{FrontLimits, Handover};
use super::stream::{Stream, secure};
use super::unrouted::Watch;

#[derive(Clone)]
pub(super) struct ConnectionLimits {
    pub(super) head: Option<Duration>,
    pub(super) body: Option<Duration>,
    pub(super) memory: Option<BodyMemory>,
    pub(super) max_head: usize,
}

impl ConnectionLimits {
    /// A request's body, within the body timeout and the listener's body memory.
    fn body(&self, body: Incoming) -> Body {
        let declared = http_body::Body::size_hint(&body).exact();
        let body = match self.body {
            Some(idle) => Body::new(TimeoutBody::new(idle, body)),
            None => Body::new(body),
        };
        match &self.memory {
            // Outside the timeout: a body waiting for memory is not idle.
            Some(memory) => Body::new(memory.charge(body, declared)),
            None => body,
        }
    }
}

/// One connection until it closes, is upgraded, or is told to finish by `shutdown`: the
/// front's while it serves it, then hyper's.
pub(super) async fn connection(served: Acceptor, (io, peer): (Connection, SocketAddr)) {
    let Acceptor {
        builder,
        tls,
        front,
        router,
        conn: limits,
        unrouted,
        shutdown,
        ..
    } = served;
    let io = match &tls {
        Some(acceptor) => match secure(io, acceptor, limits.head, unrouted).await {
            Some(io) => io,
            None => return,
        },
        None => io,
    };
    let lookalikes = Arc::new(AtomicUsize::new(0));
    let watch = Watch {
        unrouted,
        max_head: limits.max_head,
        lookalikes: Arc::clone(&lookalikes),
    };
    let (read, io) = match front {
        None => (Bytes::new(), io),
        Some(front) => {
            let at = FrontLimits {
                peer,
                head_timeout: limits.head,
                body_timeout: limits.body,
                max_head: limits.max_head,
                shutdown: shutdown.clone(),
            };
            match front.serve(io, at).await {
                Some(Handover { io, read }) => (read, io),
                None => return,
            }
        }
    };
    let io = Replayed {
        read,
        io,
        watch,
        replacing: None,
    };
    let started = Arc::new(AtomicBool::new(false));
    let head = limits.head;
    let service = {
        let started = Arc::clone(&started);
        hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            started.store(true, Ordering::Relaxed);
            let h1 = req.version() == hyper::Version::HTTP_11;
            let ended = Arc::new(AtomicBool::new(http_body::Body::is_end_stream(req.body())));
            let mut req = req.map(|body| {
                Body::new(Tracked {
                    body: limits.body(body),
                    ended: Arc::clone(&ended),
                })
            });
            req.extensions_mut().insert(ConnectInfo(peer));
            let answer = router.clone().call(req);
            let lookalikes = Arc::clone(&lookalikes);
            async move {
                let mut res = answer.await?;
                if h1 {
                    let empty = http_body::Body::is_end_stream(res.body());
                    Watch::routed(&lookalikes, res.status(), empty);
                }
                // Answered before its body was read to the end (a 413, say): hyper closes
                // the connection after the answer, and says so, as nginx does, so that the
                // client does not send its next request down a closing connection.
                if h1 && !ended.load(Ordering::Acquire) && !res.status().is_informational() {
                    res.headers_mut().insert(
                        axum::http::header::CONNECTION,
                        axum::http::HeaderValue::from_static("close"),
                    );
                }
                Ok::<_, std::convert::Infallible>(res)
            }
        })
    };
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(conn);
    // hyper times the heads of HTTP/1 requests, but not the bytes that tell HTTP/1 from
    // HTTP/2, nor an HTTP/2 connection that opens no stream: a connection that has not
    // started a request when the head's time is up is closed here.
    let first = tokio::time::sleep(head.unwrap_or(Duration::MAX));
    tokio::pin!(first);
    let (mut timed, mut stopping) = (head.is_none(), false);
    loop {
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = shutdown.cancelled(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = &mut first, if !timed => {
                timed = true;
                if !started.load(Ordering::Relaxed) {
                    return;
                }
            }
        }
    }
}

/// A connection's socket, holding its listener slot until it is closed: after an upgrade
/// the WebSocket owns it, so an upgraded connection keeps counting.
pub struct Connection {
    /// Taken only when the connection is dropped, to close it lingering (and while it is
    /// secured).
    pub(super) stream: Option<Stream>,
    pub(super) slot: Option<OwnedSemaphorePermit>,
    pub(super) opened: Option<Opened>,
}

impl Connection {
    pub fn stream(&mut self) -> &mut Stream {
        self.stream
            .as_mut()
            .expect("the socket is there until the connection is dropped")
    }
}

/// The longest a closed connection goes on reading what its peer still sends.
const LINGER: Duration = Duration::from_secs(5);

impl Drop for Connection {
    /// Closes the connection as nginx's lingering close does: the server's end is shut, and
    /// what the peer still sends (the rest of a body refused early, with a 413, say) is read
    /// and dropped until the peer closes too, or for [`LINGER`]. Closed with those bytes
    /// unread, the socket would send a reset, and a client still sending its body (hyper's,
    /// reqwest's) fails on the write and never reads the answer. The connection keeps its
    /// slot meanwhile.
    fn drop(&mut self) {
        let (Some(stream), Ok(runtime)) =
            (self.stream.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        // TLS's own close (close_notify) is sent by hyper's shutdown of a connection it
        // ends; what is left here is the socket.
        let mut tcp = stream.into_tcp();
        let held = (self.slot.take(), self.opened.take());
        runtime.spawn(async move {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            let _ = tcp.shutdown().await;
            let mut sink = [0u8; 8192];
            let drain = async { while matches!(tcp.read(&mut sink).await, Ok(n) if n > 0) {} };
            let _ = tokio::time::timeout(LINGER, drain).await;
            drop(held);
        });
    }
}

/// A connection whose first bytes were read by a [`Front`]: they are read again first.
/// What hyper writes goes out as written, but for its own refusals ([`Watch`]).
struct Replayed {
    read: Bytes,
    io: Connection,
    watch: Watch,
    /// The answer going out instead of a write of hyper's, and that write's length.
    replacing: Option<(Bytes, usize)>,
}

impl Replayed {
    /// Writes what replaces `written`, if anything does: then `Some`, with the length
    /// hyper is told was written.
    fn poll_replace(
        &mut self,
        cx: &mut Context<'_>,
        written: &[u8],
    ) -> Option<Poll<std::io::Result<usize>>> {
        if self.replacing.is_none() {
            self.replacing = Some((self.watch.replace(written)?, written.len()));
        }
        let (answer, len) = self.replacing.as_mut()?;
        while !answer.is_empty() {
            match Pin::new(self.io.stream()).poll_write(cx, answer) {
                Poll::Ready(Ok(0)) => {
                    return Some(Poll::Ready(Err(std::io::ErrorKind::WriteZero.into())));
                }
                Poll::Ready(Ok(n)) => drop(answer.split_to(n)),
                other => return Some(other),
            }
        }
        let len = *len;
        self.replacing = None;
        Some(Poll::Ready(Ok(len)))
    }
}

impl AsyncRead for Replayed {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.read.is_empty() {
            return Pin::new(this.io.stream()).poll_read(cx, buf);
        }
        let n = this.read.len().min(buf.remaining());
        buf.put_slice(&this.read.split_to(n));
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Replayed {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if let Some(replaced) = this.poll_replace(cx, buf) {
            return replaced;
        }
        Pin::new(this.io.stream()).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        // hyper's own refusal is a head alone: one buffer.
        let mut written = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (written.next(), written.next())
            && let Some(replaced) = this.poll_replace(cx, only)
        {
            return replaced;
        }
        Pin::new(this.io.stream()).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io
            .stream
            .as_ref()
            .is_some_and(Stream::is_write_vectored)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(self.get_mut().io.stream()).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(self.get_mut().io.stream()).poll_shutdown(cx)
    }
}
