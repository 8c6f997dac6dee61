//! The gateway's HTTP/1.1 fast path, for the calls that need nothing but their head
//! rewritten: a body of known length that fits the in-memory buffer, to an endpoint that
//! neither mirrors nor speaks gRPC, with its key. Such a call is forwarded as nginx forwards
//! it: the head parsed in place (with httparse, as hyper parses it), rewritten into the
//! instance's buffer with the body and written to a kept-alive instance connection in one
//! write; the answer's head parsed likewise and passed on, the body as it comes. No request
//! or header map is built and no task hop is made; the gateway's throughput against nginx
//! (BENCHMARKS.md) depends on it.
//!
//! Anything else (chunked or large bodies, `Expect`, upgrades, HTTP/1.0, HTTP/2, a wrong key,
//! an unknown endpoint, a head that does not parse) hands the connection, with what was read
//! of it, to hyper and [`Gateway::forward`], which answer as they always have; so does
//! `KEP_LOG=debug`, which logs requests through the router.

mod answer;
mod chunks;
#[cfg(test)]
mod differential;
pub mod parsers;
mod request;
#[cfg(test)]
mod tests;
mod upstream;

use answer::{Answer, Framing, date_line, header_line, status_line};
use chunks::Chunks;
use request::Call;
use request::length;
use upstream::{exchange, read_more};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::Response;
use bytes::{Buf as _, BytesMut};
use kep_core::limits::Key;
use kep_core::listener::{Connection, Front, FrontLimits, Handover};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::pool::InstancePool;
use crate::error::SendError;
use crate::forwarding::{bad_gateway, split_path};
use crate::headers::{authorized, is_forwarding, is_hop_by_hop, underscored};
use crate::{Gateway, GatewayError, Shape};

/// As many headers as hyper reads; a head with more is handed over.
const MAX_HEADERS: usize = 100;
/// Bodies up to this are forwarded here (within the gateway's buffer and body limit).
/// Larger ones go through hyper: they count against the listener's body memory past this.
const FAST_BODY: u64 = 64 * 1024;
/// The longest answer head an instance may send.
const MAX_ANSWER_HEAD: usize = 64 * 1024;
/// How HTTP/2's connection preface starts (RFC 9113 §3.4).
const H2_PREFACE_LINE: &[u8] = b"PRI * HTTP/2.0";
/// Room kept free for each read.
const READ_ROOM: usize = 16 * 1024;

/// The gateway listener's [`Front`].
pub struct GatewayFront(pub Arc<Gateway>);

impl Front for GatewayFront {
    fn serve(
        self: Arc<Self>,
        io: Connection,
        limits: FrontLimits,
    ) -> Pin<Box<dyn Future<Output = Option<Handover>> + Send>> {
        let stopped = Box::pin(limits.shutdown.clone().cancelled_owned());
        let session = Session {
            gateway: Arc::clone(&self.0),
            peer: limits.peer.ip().to_string().into_bytes().into(),
            io,
            limits,
            stopped,
            buf: BytesMut::with_capacity(READ_ROOM),
            up: BytesMut::with_capacity(READ_ROOM),
            out: Vec::with_capacity(1024),
            served: false,
        };
        Box::pin(session.run())
    }
}

struct Session {
    gateway: Arc<Gateway>,
    /// The caller's address, as its calls' `X-Forwarded-For` says it.
    peer: Box<[u8]>,
    io: Connection,
    limits: FrontLimits,
    stopped: Pin<Box<WaitForCancellationFutureOwned>>,
    /// What the caller sent and was not yet answered.
    buf: BytesMut,
    /// What the instance sent.
    up: BytesMut,
    /// What goes out next, to the instance or to the caller.
    out: Vec<u8>,
    /// Whether the connection has carried an HTTP/1.1 call.
    served: bool,
}

/// What to do with the connection after a call.
enum Next {
    KeepAlive,
    Close,
    /// Hyper serves this call (its head is given back) and the rest.
    Handover,
}

enum Head {
    /// A head of this many bytes is at the front of the buffer.
    Complete(usize),
    /// Closed, timed out, or the listener is stopping while the connection is idle.
    Closed,
    /// Not one for the fast path: hyper reads it (and answers a malformed one).
    Other,
    /// HTTP/2's connection preface after HTTP/1.1 calls: a bad request, as nginx answers
    /// it, not a switch of protocols mid-connection (only a connection's first bytes may
    /// choose HTTP/2).
    Preface,
}

impl Session {
    async fn run(mut self) -> Option<Handover> {
        loop {
            let len = match self.read_head().await {
                Head::Complete(len) => len,
                Head::Closed => return None,
                Head::Other => return Some(self.handover(BytesMut::new())),
                Head::Preface => {
                    let refused = GatewayError::BadRequest(
                        "an HTTP/2 preface on a connection that carried HTTP/1.1 calls".into(),
                    );
                    self.answer(axum::response::IntoResponse::into_response(refused), true)
                        .await;
                    return None;
                }
            };
            let head = self.buf.split_to(len);
            match self.call(&head).await {
                Next::KeepAlive if !self.limits.shutdown.is_cancelled() => self.served = true,
                Next::KeepAlive | Next::Close => return None,
                Next::Handover => return Some(self.handover(head)),
            }
        }
    }

    fn handover(self, mut head: BytesMut) -> Handover {
        // The head was split off the front of the buffer: they join without a copy.
        head.unsplit(self.buf);
        Handover {
            io: self.io,
            read: head.freeze(),
        }
    }

    /// Reads until a whole request head is buffered, within the head timeout (which also
    /// bounds the wait for a kept-alive connection's next request).
    async fn read_head(&mut self) -> Head {
        let deadline = self
            .limits
            .head_timeout
            .map(|t| tokio::time::Instant::now() + t);
        loop {
            if !self.buf.is_empty() {
                let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                match httparse::Request::new(&mut headers).parse(&self.buf) {
                    Ok(httparse::Status::Complete(len)) => return Head::Complete(len),
                    Ok(httparse::Status::Partial) if self.buf.len() < self.limits.max_head => {}
                    Err(_) if self.served && self.buf.starts_with(H2_PREFACE_LINE) => {
                        return Head::Preface;
                    }
                    _ => return Head::Other,
                }
            }
            self.buf.reserve(READ_ROOM);
            let idle = self.buf.is_empty();
            let read = tokio::select! {
                biased;
                read = self.io.stream().read_buf(&mut self.buf) => read,
                () = self.stopped.as_mut(), if idle => return Head::Closed,
                () = sleep_until(deadline) => return Head::Closed,
            };
            match read {
                Ok(0) | Err(_) => return Head::Closed,
                Ok(_) => {}
            }
        }
    }

    /// One call whose head is `head`, its body (if any) at the front of the buffer.
    async fn call(&mut self, head: &[u8]) -> Next {
        let start = Instant::now();
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        let Ok(httparse::Status::Complete(_)) = req.parse(head) else {
            return Next::Handover;
        };
        let Some(call) = Call::read(&req, self.fast_body()) else {
            return Next::Handover;
        };
        let table = self.gateway.table.load();
        let Some(route) = table.endpoints.get(call.endpoint) else {
            return Next::Handover;
        };
        if route.http2
            || route.mirrors()
            || !authorized(call.key, &route.key_hash)
            || crate::broadcast::is_broadcast(req.method.unwrap_or(""), call.target.0)
        {
            return Next::Handover;
        }
        // The body is read before anything is answered, so the connection stays usable
        // whatever the answer.
        if !self.read_body(call.body_len).await {
            return Next::Close;
        }
        let body = self.buf.split_to(call.body_len as usize);
        // Never gRPC here: gRPC endpoints are handed over.
        let shape = Shape::of(None, call.target.0);

        let admission = match self
            .gateway
            .limiter
            .admit(Key::Client(Arc::clone(&route.name)))
        {
            Ok(admission) => admission,
            Err(refusal) => {
                let res = self
                    .gateway
                    .metered(&route.meter, start, Err(refusal.into()), shape);
                return self.answer(res, call.close).await;
            }
        };
        let Some(choice) = route.choose() else {
            let e = GatewayError::NoReadyInstance(call.endpoint.to_owned());
            let res = self.gateway.metered(&route.meter, start, Err(e), shape);
            return self.answer(res, call.close).await;
        };
        let backend = choice.primary;
        let _in_flight = self.gateway.metered.then(|| backend.meter.enter());

        // A refused connection (an instance that just died) is tried on the next instance.
        let attempts = backend.instance_count().min(3);
        let mut failed = None;
        let mut answered = None;
        for _ in 0..attempts {
            let Some(instance) = backend.instance() else {
                break;
            };
            self.out.clear();
            let host = instance.host.as_bytes();
            call.write_upstream(&req, (host, &self.peer), &body, &mut self.out);
            let exchange = exchange(&instance.pool, &self.out, &mut self.up, call.head_only);
            match tokio::time::timeout(self.gateway.timeout, exchange).await {
                Err(_) => {
                    failed = Some(GatewayError::GatewayTimeout(self.gateway.timeout.as_secs()));
                    break;
                }
                Ok(Ok(got)) => {
                    answered = Some((got, Arc::clone(&instance.pool)));
                    break;
                }
                Ok(Err(e)) if e.connect => failed = Some(bad_gateway(&backend.name, &e)),
                Ok(Err(e)) => {
                    failed = Some(bad_gateway(&backend.name, &e));
                    break;
                }
            }
        }
        let Some(((conn, answer), pool)) = answered else {
            let e = failed.unwrap_or_else(|| GatewayError::NoReadyInstance(call.endpoint.into()));
            let res = self.gateway.metered(&backend.meter, start, Err(e), shape);
            return self.answer(res, call.close).await;
        };
        if self.gateway.metered {
            backend.meter.record(answer.status, start.elapsed());
        }
        let next = self.pass_on(conn, &answer, &pool, call.close).await;
        drop(admission);
        next
    }

    fn fast_body(&self) -> u64 {
        let limits = &self.gateway.limits;
        FAST_BODY.min(limits.buffer).min(limits.max_body)
    }

    /// Reads until `len` body bytes are buffered, with no pause longer than the body
    /// timeout; false when the caller stopped.
    async fn read_body(&mut self, len: u64) -> bool {
        while (self.buf.len() as u64) < len {
            self.buf.reserve(READ_ROOM);
            let read = tokio::select! {
                biased;
                read = self.io.stream().read_buf(&mut self.buf) => read,
                () = sleep_for(self.limits.body_timeout) => return false,
            };
            if !matches!(read, Ok(n) if n > 0) {
                return false;
            }
        }
        true
    }

    /// Passes the instance's answer on: its head as rewritten, then its body as it comes;
    /// the instance's connection goes back to its pool once the body has ended where its
    /// framing says.
    async fn pass_on(
        &mut self,
        mut conn: TcpStream,
        answer: &Answer,
        pool: &InstancePool,
        close: bool,
    ) -> Next {
        self.out.clear();
        answer.write_head(&self.up[..answer.head_len], close, &mut self.out);
        self.up.advance(answer.head_len);
        let mut reusable = answer.reusable;
        let ended = match answer.framing {
            Framing::Empty => true,
            Framing::Length(mut left) => loop {
                let n = left.min(self.up.len() as u64);
                self.out.extend_from_slice(&self.up[..n as usize]);
                self.up.advance(n as usize);
                left -= n;
                if left == 0 {
                    break true;
                }
                if !self.flush().await || !read_more(&mut conn, &mut self.up).await {
                    break false;
                }
            },
            Framing::Chunked => {
                let mut chunks = Chunks::default();
                loop {
                    match chunks.feed(&self.up) {
                        Err(()) => break false,
                        Ok(Some(end)) => {
                            self.out.extend_from_slice(&self.up[..end]);
                            self.up.advance(end);
                            break true;
                        }
                        Ok(None) => {
                            self.out.extend_from_slice(&self.up);
                            self.up.clear();
                        }
                    }
                    if !self.flush().await || !read_more(&mut conn, &mut self.up).await {
                        break false;
                    }
                }
            }
            Framing::UntilClose => {
                reusable = false;
                loop {
                    self.out.extend_from_slice(&self.up);
                    self.up.clear();
                    if !self.flush().await {
                        break false;
                    }
                    self.up.reserve(READ_ROOM);
                    match conn.read_buf(&mut self.up).await {
                        Ok(0) => break true,
                        Ok(_) => {}
                        Err(_) => break false,
                    }
                }
            }
        };
        // What came past the end of the answer is not trusted: the connection goes with it.
        if ended && reusable && self.up.is_empty() {
            pool.put_raw(conn);
        }
        self.up.clear();
        match (ended && self.flush().await, close || answer.closes_caller()) {
            (true, false) => Next::KeepAlive,
            _ => Next::Close,
        }
    }

    /// Writes out what is gathered for the caller.
    async fn flush(&mut self) -> bool {
        let stream = self.io.stream();
        // Flushed too: over TLS, what the socket did not take at once waits in the session
        // until then (over plain TCP it is a no-op).
        let written = stream.write_all(&self.out).await.is_ok() && stream.flush().await.is_ok();
        self.out.clear();
        written
    }

    /// Writes an answer the gateway made itself (a small JSON body).
    async fn answer(&mut self, res: Response, close: bool) -> Next {
        let (parts, body) = res.into_parts();
        let Ok(body) = http_body_util::BodyExt::collect(body).await else {
            return Next::Close;
        };
        let body = body.to_bytes();
        let out = &mut self.out;
        out.clear();
        status_line(out, parts.status.as_u16(), parts.status.canonical_reason());
        for (name, value) in &parts.headers {
            header_line(out, name.as_str().as_bytes(), value.as_bytes());
        }
        header_line(out, b"content-length", body.len().to_string().as_bytes());
        date_line(out);
        if close {
            header_line(out, b"connection", b"close");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&body);
        if self.flush().await && !close {
            Next::KeepAlive
        } else {
            Next::Close
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn sleep_for(timeout: Option<Duration>) {
    sleep_until(timeout.map(|t| tokio::time::Instant::now() + t)).await;
}
