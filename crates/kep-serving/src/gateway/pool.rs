//! HTTP/1.1 connections to one instance, kept alive and driven by the task of the call that
//! uses them, as an nginx worker drives its own upstream connections: a call costs no hop to
//! a connection task of its own, nor to another worker thread.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::Pin;
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

type Driver = Pin<Box<http1::Connection<TokioIo<TcpStream>, ProxyBody>>>;

struct Conn {
    tx: http1::SendRequest<ProxyBody>,
    driver: Driver,
    idle_since: Instant,
}

/// Limits every instance's pool shares.
#[derive(Debug, Clone, Copy)]
pub struct PoolSettings {
    pub connect_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_idle: usize,
}

pub struct InstancePool {
    addr: SocketAddr,
    idle: Mutex<Vec<Conn>>,
    settings: PoolSettings,
}

/// Why a call did not get an answer.
#[derive(Debug)]
pub struct SendError {
    /// No connection could be made: the call never reached the instance.
    pub connect: bool,
    pub cause: String,
}

impl SendError {
    fn connect(e: std::io::Error) -> Self {
        SendError {
            connect: true,
            cause: format!("connecting: {e}"),
        }
    }

    /// The innermost cause of `e`, which says what went wrong in the fewest words.
    pub fn http(e: &(dyn std::error::Error + 'static)) -> Self {
        let mut cause = e;
        while let Some(next) = cause.source() {
            cause = next;
        }
        SendError {
            connect: false,
            cause: cause.to_string(),
        }
    }
}

impl InstancePool {
    pub fn new(addr: SocketAddr, settings: PoolSettings) -> Arc<Self> {
        Arc::new(InstancePool {
            addr,
            idle: Mutex::new(Vec::new()),
            settings,
        })
    }

    fn take_idle(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().expect("the pool lock is never poisoned");
        while let Some(conn) = idle.pop() {
            if conn.idle_since.elapsed() < self.settings.idle_timeout {
                return Some(conn);
            }
        }
        None
    }

    fn put(&self, mut conn: Conn) {
        conn.idle_since = Instant::now();
        let mut idle = self.idle.lock().expect("the pool lock is never poisoned");
        if idle.len() < self.settings.max_idle {
            idle.push(conn);
        }
    }

    async fn connect(&self) -> Result<Conn, SendError> {
        let stream =
            tokio::time::timeout(self.settings.connect_timeout, TcpStream::connect(self.addr))
                .await
                .map_err(|_| SendError::connect(std::io::ErrorKind::TimedOut.into()))?
                .map_err(SendError::connect)?;
        let _ = stream.set_nodelay(true);
        let (tx, driver) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| SendError::http(&e))?;
        Ok(Conn {
            tx,
            driver: Box::pin(driver),
            idle_since: Instant::now(),
        })
    }

    /// Sends `req` on a kept-alive connection, or a new one; a kept-alive connection the
    /// instance has closed meanwhile is dropped and the call goes on a new one.
    pub async fn send(
        self: &Arc<Self>,
        mut req: Request<ProxyBody>,
    ) -> Result<Response<PooledBody>, SendError> {
        loop {
            let (mut conn, reused) = match self.take_idle() {
                Some(c) => (c, true),
                None => (self.connect().await?, false),
            };
            let Conn { tx, driver, .. } = &mut conn;
            match drive(driver, poll_fn(|cx| tx.poll_ready(cx))).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) if reused => continue,
                Ok(Err(e)) | Err(e) => return Err(SendError::http(&e)),
            }
            match drive(driver, tx.try_send_request(req)).await {
                Ok(Ok(res)) => {
                    let (parts, body) = res.into_parts();
                    return Ok(Response::from_parts(
                        parts,
                        PooledBody {
                            body,
                            conn: Some(conn),
                            pool: Arc::clone(self),
                        },
                    ));
                }
                Ok(Err(mut e)) => match e.take_message() {
                    // Nothing was written: the request can go on another connection.
                    Some(unsent) if reused => req = unsent,
                    _ => return Err(SendError::http(&e.into_error())),
                },
                Err(e) => return Err(SendError::http(&e)),
            }
        }
    }
}

/// Polls `fut` to completion while polling the connection's driver beside it.
async fn drive<F: Future>(driver: &mut Driver, fut: F) -> Result<F::Output, hyper::Error> {
    let mut fut = std::pin::pin!(fut);
    let mut closed = false;
    poll_fn(|cx| {
        if let Poll::Ready(out) = fut.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        if !closed {
            match driver.as_mut().poll(cx) {
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => closed = true,
                Poll::Pending => {}
            }
            if let Poll::Ready(out) = fut.as_mut().poll(cx) {
                return Poll::Ready(Ok(out));
            }
        }
        Poll::Pending
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
