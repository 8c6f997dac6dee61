//! HTTP/1.1 connections to one instance, kept alive and driven by the task of the call that
//! uses them, as an nginx worker drives its own upstream connections: a call costs no hop to
//! a connection task of its own, nor to another worker thread. hyper's connections serve the
//! router's calls; bare sockets serve the fast path's ([`super::h1`]). A gRPC instance's
//! calls on one worker share that worker's HTTP/2 connection instead ([`super::http2`]).

use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::body::ProxyBody;
use super::http2::{Http2Body, Http2Conn};
use crate::error::SendError;

type Driver = Pin<Box<http1::Connection<TokioIo<TcpStream>, ProxyBody>>>;

struct Conn {
    tx: http1::SendRequest<ProxyBody>,
    driver: Driver,
}

/// Limits every instance's pool shares.
#[derive(Debug, Clone, Copy)]
pub struct PoolSettings {
    pub connect_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_idle: usize,
    /// The gateway listener's worker threads.
    pub workers: usize,
}

pub struct InstancePool {
    addr: SocketAddr,
    idle: Idle<Conn>,
    /// Per worker thread of the listener ([`kep_core::listener::worker`]): a socket is
    /// registered with the runtime it was opened on, and is used there.
    raw: Box<[Idle<TcpStream>]>,
    /// Per worker thread too: the connection's task runs on the worker that made it, and a
    /// call from another worker would wake that thread and be woken back, twice a call.
    http2: Box<[Http2Conn]>,
    settings: PoolSettings,
}

/// The calling worker thread's own of what a pool keeps per worker.
fn here<T>(per_worker: &[T]) -> &T {
    &per_worker[kep_core::listener::worker() % per_worker.len()]
}

/// Kept-alive connections with the time each was put back.
struct Idle<T>(Mutex<Vec<(T, Instant)>>);

impl<T> Idle<T> {
    /// The most recently used connection not idle past the timeout; older ones are closed.
    fn take(&self, settings: &PoolSettings) -> Option<T> {
        let mut idle = self.0.lock().expect("the pool lock is never poisoned");
        while let Some((conn, since)) = idle.pop() {
            if since.elapsed() < settings.idle_timeout {
                return Some(conn);
            }
        }
        None
    }

    fn put(&self, conn: T, settings: &PoolSettings) {
        let mut idle = self.0.lock().expect("the pool lock is never poisoned");
        if idle.len() < settings.max_idle {
            idle.push((conn, Instant::now()));
        }
    }
}

impl InstancePool {
    pub fn new(addr: SocketAddr, settings: PoolSettings) -> Arc<Self> {
        Arc::new(InstancePool {
            addr,
            idle: Idle(Mutex::default()),
            raw: (0..=settings.workers)
                .map(|_| Idle(Mutex::default()))
                .collect(),
            http2: (0..=settings.workers)
                .map(|_| Http2Conn::new(addr))
                .collect(),
            settings,
        })
    }

    fn put(&self, conn: Conn) {
        self.idle.put(conn, &self.settings);
    }

    /// A kept-alive bare connection, as the fast path left it: between answers.
    pub fn take_raw(&self) -> Option<TcpStream> {
        self.raw_here().take(&self.settings)
    }

    /// Keeps a bare connection whose last answer was read to its end.
    pub fn put_raw(&self, stream: TcpStream) {
        self.raw_here().put(stream, &self.settings);
    }

    fn raw_here(&self) -> &Idle<TcpStream> {
        here(&self.raw)
    }

    /// A new connection to the instance.
    pub async fn connect_raw(&self) -> Result<TcpStream, SendError> {
        let stream =
            tokio::time::timeout(self.settings.connect_timeout, TcpStream::connect(self.addr))
                .await
                .map_err(|_| SendError::connect(std::io::ErrorKind::TimedOut.into()))?
                .map_err(SendError::connect)?;
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }

    /// Sends `req` on this worker's HTTP/2 connection to the instance (a gRPC instance's).
    pub async fn send_http2(
        &self,
        req: Request<ProxyBody>,
    ) -> Result<Response<Http2Body>, SendError> {
        here(&self.http2).send(req, || self.connect_raw()).await
    }

    async fn connect(&self) -> Result<Conn, SendError> {
        let stream = self.connect_raw().await?;
        let (tx, driver) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| SendError::http(&e))?;
        Ok(Conn {
            tx,
            driver: Box::pin(driver),
        })
    }

    /// Sends `req` on a kept-alive connection, or a new one; a kept-alive connection the
    /// instance has closed meanwhile is dropped and the call goes on a new one.
    pub async fn send(
        self: &Arc<Self>,
        mut req: Request<ProxyBody>,
    ) -> Result<Response<PooledBody>, SendError> {
        loop {
            let (conn, reused) = match self.idle.take(&self.settings) {
                Some(c) => (c, true),
                None => (self.connect().await?, false),
            };
            let Conn {
                mut tx, mut driver, ..
            } = conn;
            match drive(&mut driver, pin!(poll_fn(|cx| tx.poll_ready(cx)))).await {
                Driven::Done(Ok(())) => {}
                _ if reused => continue,
                Driven::Done(Err(e)) | Driven::Ended(Err(e)) => return Err(SendError::http(&e)),
                Driven::Ended(Ok(())) => return Err(SendError::closed()),
            }
            let mut sent = pin!(tx.try_send_request(req));
            let outcome = match drive(&mut driver, sent.as_mut()).await {
                Driven::Done(outcome) => outcome,
                Driven::Ended(ended) => {
                    // The connection ended with the request still queued: dropping it hands
                    // the request back, unsent.
                    drop(driver);
                    match sent.await {
                        // An answer cannot come over an ended connection; were one to, it is
                        // dropped with it rather than trusted.
                        Ok(_) => return Err(SendError::closed()),
                        Err(mut e) => match (e.take_message(), ended) {
                            (Some(unsent), _) if reused => {
                                req = unsent;
                                continue;
                            }
                            (_, Err(ended)) => return Err(SendError::http(&ended)),
                            (_, Ok(())) => return Err(SendError::http(&e.into_error())),
                        },
                    }
                }
            };
            match outcome {
                Ok(res) => {
                    let (parts, body) = res.into_parts();
                    let conn = Conn { tx, driver };
                    return Ok(Response::from_parts(
                        parts,
                        PooledBody {
                            body,
                            conn: Some(conn),
                            pool: Arc::clone(self),
                        },
                    ));
                }
                Err(mut e) => match e.take_message() {
                    // Nothing was written: the request can go on another connection.
                    Some(unsent) if reused => req = unsent,
                    _ => return Err(SendError::http(&e.into_error())),
                },
            }
        }
    }
}

enum Driven<T> {
    Done(T),
    /// The connection ended first (closed, or failed) while `fut` was still pending.
    Ended(Result<(), hyper::Error>),
}

/// Polls `fut` while polling the connection's driver beside it, the driver first so that a
/// connection the instance has closed is seen before anything is sent on it.
async fn drive<F: Future>(driver: &mut Driver, mut fut: Pin<&mut F>) -> Driven<F::Output> {
    poll_fn(|cx| {
        let ended = driver.as_mut().poll(cx);
        if let Poll::Ready(out) = fut.as_mut().poll(cx) {
            return Poll::Ready(Driven::Done(out));
        }
        match ended {
            Poll::Ready(r) => Poll::Ready(Driven::Ended(r)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// An instance's answer body; reading it drives its connection, which goes back to the
/// pool once the body has been read to its end.
pub struct PooledBody {
    body: Incoming,
    conn: Option<Conn>,
    pool: Arc<InstancePool>,
}

impl PooledBody {
    fn release(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.put(conn);
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if let Some(conn) = &mut this.conn
            && conn.driver.as_mut().poll(cx).is_ready()
        {
            // The connection has ended: what it delivered is still read, then it is gone.
            this.conn = None;
        }
        let frame = Pin::new(&mut this.body).poll_frame(cx);
        match &frame {
            Poll::Ready(None) => this.release(),
            Poll::Ready(Some(Ok(_))) if this.body.is_end_stream() => this.release(),
            Poll::Ready(Some(Err(_))) => this.conn = None,
            _ => {}
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        // An answer with no body is never polled: its connection is free all the same. One
        // dropped half-read is closed with it.
        if self.body.is_end_stream() {
            self.release();
        }
    }
}
