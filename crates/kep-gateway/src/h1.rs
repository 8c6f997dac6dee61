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

use super::pool::{InstancePool, SendError};
use super::{Gateway, authorized, bad_gateway, is_hop_by_hop, split_path};
use crate::GatewayError;

/// As many headers as hyper reads; a head with more is handed over.
const MAX_HEADERS: usize = 100;
/// Bodies up to this are forwarded here (within the gateway's buffer and body limit).
/// Larger ones go through hyper: they count against the listener's body memory past this.
const FAST_BODY: u64 = 64 * 1024;
/// The longest answer head an instance may send.
const MAX_ANSWER_HEAD: usize = 64 * 1024;
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
            io,
            limits,
            stopped,
            buf: BytesMut::with_capacity(READ_ROOM),
            up: BytesMut::with_capacity(READ_ROOM),
            out: Vec::with_capacity(1024),
        };
        Box::pin(session.run())
    }
}

struct Session {
    gateway: Arc<Gateway>,
    io: Connection,
    limits: FrontLimits,
    stopped: Pin<Box<WaitForCancellationFutureOwned>>,
    /// What the caller sent and was not yet answered.
    buf: BytesMut,
    /// What the instance sent.
    up: BytesMut,
    /// What goes out next, to the instance or to the caller.
    out: Vec<u8>,
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
}

impl Session {
    async fn run(mut self) -> Option<Handover> {
        loop {
            let len = match self.read_head().await {
                Head::Complete(len) => len,
                Head::Closed => return None,
                Head::Other => return Some(self.handover(BytesMut::new())),
            };
            let head = self.buf.split_to(len);
            match self.call(&head).await {
                Next::KeepAlive if !self.limits.shutdown.is_cancelled() => {}
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
        if route.http2 || route.mirrors() || !authorized(call.key, &route.key_hash) {
            return Next::Handover;
        }
        // The body is read before anything is answered, so the connection stays usable
        // whatever the answer.
        if !self.read_body(call.body_len).await {
            return Next::Close;
        }
        let body = self.buf.split_to(call.body_len as usize);

        let admission = match self
            .gateway
            .limiter
            .admit(Key::Client(Arc::clone(&route.name)))
        {
            Ok(admission) => admission,
            Err(refusal) => {
                let res = self
                    .gateway
                    .metered(&route.meter, start, Err(refusal.into()));
                return self.answer(res, call.close).await;
            }
        };
        let Some(choice) = route.choose() else {
            let e = GatewayError::NoReadyInstance(call.endpoint.to_owned());
            let res = self.gateway.metered(&route.meter, start, Err(e));
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
            call.write_upstream(&req, instance.host.as_bytes(), &body, &mut self.out);
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
            let res = self.gateway.metered(&backend.meter, start, Err(e));
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
        let written = self.io.stream().write_all(&self.out).await.is_ok();
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

/// A request head the fast path takes, as read by [`Call::read`].
struct Call<'h> {
    endpoint: &'h str,
    /// The target on the instance: the path after the endpoint's name, and the query.
    target: (&'h str, Option<&'h str>),
    key: Option<&'h [u8]>,
    body_len: u64,
    /// The caller sent a length (0 included): the instance gets one too.
    declared: bool,
    /// The caller asked for the connection to be closed after this call.
    close: bool,
    /// A `HEAD` call: the answer has no body, whatever its head says.
    head_only: bool,
}

impl<'h> Call<'h> {
    /// The call, when it is one for the fast path: HTTP/1.1, a plain target, a body of at
    /// most `max_body` bytes of declared length, and nothing for hyper to do first.
    fn read(req: &httparse::Request<'_, 'h>, max_body: u64) -> Option<Call<'h>> {
        let (method, target) = (req.method?, req.path?);
        if req.version != Some(1) || method == "CONNECT" || !target.bytes().all(plain) {
            return None;
        }
        let (path, query) = match target.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (target, None),
        };
        let (endpoint, rest) = split_path(path)?;
        let mut call = Call {
            endpoint,
            target: (rest, query),
            key: None,
            body_len: 0,
            declared: false,
            close: false,
            head_only: method == "HEAD",
        };
        for h in req.headers.iter() {
            let name = h.name.as_bytes();
            if name.eq_ignore_ascii_case(b"content-length") {
                let len = length(h.value)?;
                if call.declared && len != call.body_len {
                    return None;
                }
                (call.body_len, call.declared) = (len, true);
            } else if name.eq_ignore_ascii_case(b"authorization") {
                call.key = Some(h.value);
            } else if name.eq_ignore_ascii_case(b"connection") {
                for token in h.value.split(|&b| b == b',') {
                    match token.trim_ascii() {
                        t if t.eq_ignore_ascii_case(b"close") => call.close = true,
                        t if t.eq_ignore_ascii_case(b"keep-alive") => {}
                        // It names headers to drop, or an upgrade: hyper's work.
                        _ => return None,
                    }
                }
            } else if [&b"transfer-encoding"[..], b"upgrade", b"expect"]
                .iter()
                .any(|n| name.eq_ignore_ascii_case(n))
            {
                return None;
            }
        }
        (call.body_len <= max_body).then_some(call)
    }

    /// The request as the instance gets it: origin form, its own `Host`, the caller's
    /// headers less the hop-by-hop ones, `Host` and the API key (as [`super::upstream_headers`]
    /// leaves them), and the body.
    fn write_upstream(
        &self,
        req: &httparse::Request<'_, '_>,
        host: &[u8],
        body: &[u8],
        out: &mut Vec<u8>,
    ) {
        out.extend_from_slice(req.method.unwrap_or_default().as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.target.0.as_bytes());
        if let Some(query) = self.target.1 {
            out.push(b'?');
            out.extend_from_slice(query.as_bytes());
        }
        out.extend_from_slice(b" HTTP/1.1\r\n");
        header_line(out, b"host", host);
        for h in req.headers.iter() {
            let name = h.name.as_bytes();
            // `TE: trailers` is end to end (gRPC needs it).
            let dropped = DROPPED.iter().any(|d| name.eq_ignore_ascii_case(d))
                || (is_hop_by_hop(name)
                    && !(name.eq_ignore_ascii_case(b"te") && h.value == b"trailers"));
            if !dropped {
                header_line(out, name, h.value);
            }
        }
        if self.declared || !body.is_empty() {
            header_line(out, b"content-length", body.len().to_string().as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(body);
    }
}

/// The caller's headers the instance does not get beside the hop-by-hop ones: `Host`, the
/// API key, and the length (written anew).
const DROPPED: &[&[u8]] = &[b"host", b"authorization", b"content-length"];

/// A byte a request target may hold as it is (RFC 3986's unreserved, sub-delims, `:@/?%`);
/// a target with any other is left to hyper, which refuses what `http` does not parse.
fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&b)
}

/// A `Content-Length` value: digits only.
fn length(value: &[u8]) -> Option<u64> {
    let digits = value.trim_ascii();
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

fn status_line(out: &mut Vec<u8>, code: u16, reason: Option<&str>) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(code.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason.unwrap_or_default().as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn header_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `date`, which hyper's server adds to an answer that has none.
fn date_line(out: &mut Vec<u8>) {
    let now = httpdate::fmt_http_date(std::time::SystemTime::now());
    header_line(out, b"date", now.as_bytes());
}

/// How an answer's body is delimited (RFC 9112 §6.3).
#[derive(Debug, PartialEq)]
enum Framing {
    Empty,
    Length(u64),
    Chunked,
    /// The instance closes the connection at its end.
    UntilClose,
}

/// An instance's answer head, at the front of the instance buffer.
#[derive(Debug)]
struct Answer {
    head_len: usize,
    status: StatusCode,
    framing: Framing,
    /// The instance keeps the connection open after it.
    reusable: bool,
}

impl Answer {
    /// Reads the answer head at the front of `buf`: `None` while it is incomplete; an error
    /// for one that does not parse or frame, or an upgrade nobody asked for. Interim (1xx)
    /// answers are dropped from `buf`.
    fn read(buf: &mut BytesMut, head_only: bool) -> Result<Option<Answer>, SendError> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut res = httparse::Response::new(&mut headers);
            let head_len = match res.parse(buf) {
                Ok(httparse::Status::Complete(len)) => len,
                Ok(httparse::Status::Partial) if buf.len() < MAX_ANSWER_HEAD => return Ok(None),
                Ok(httparse::Status::Partial) => return Err(broken("an answer head over 64 KiB")),
                Err(e) => return Err(broken(&format!("an answer that does not parse: {e}"))),
            };
            let code = res.code.unwrap_or_default();
            if code == 101 {
                return Err(broken("an upgrade nobody asked for"));
            }
            if (100..200).contains(&code) {
                buf.advance(head_len);
                continue;
            }
            let status = StatusCode::from_u16(code).map_err(|_| broken("a status out of range"))?;
            let mut reusable = res.version == Some(1);
            let (mut length, mut chunked, mut coded) = (None, false, false);
            for h in res.headers.iter() {
                let name = h.name.as_bytes();
                if name.eq_ignore_ascii_case(b"content-length") {
                    let len = length_of(h.value)?;
                    if length.is_some_and(|l| l != len) {
                        return Err(broken("two different lengths"));
                    }
                    length = Some(len);
                } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                    coded = true;
                    chunked = h
                        .value
                        .rsplit(|&b| b == b',')
                        .next()
                        .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
                } else if name.eq_ignore_ascii_case(b"connection") {
                    let tokens = h.value.split(|&b| b == b',').map(<[u8]>::trim_ascii);
                    if tokens.clone().any(|t| t.eq_ignore_ascii_case(b"close")) {
                        reusable = false;
                    }
                }
            }
            let framing = if head_only || code == 204 || code == 304 {
                Framing::Empty
            } else if coded && chunked {
                Framing::Chunked
            } else if coded {
                Framing::UntilClose
            } else {
                match length {
                    Some(0) => Framing::Empty,
                    Some(len) => Framing::Length(len),
                    None => Framing::UntilClose,
                }
            };
            return Ok(Some(Answer {
                head_len,
                status,
                framing,
                reusable,
            }));
        }
    }

    /// The head as the caller gets it: HTTP/1.1, the instance's headers less the hop-by-hop
    /// ones (`Transfer-Encoding` stays with a body passed on in its chunks), a `date` when
    /// there is none, and `connection: close` when the connection ends after it.
    fn write_head(&self, raw: &[u8], close: bool, out: &mut Vec<u8>) {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut res = httparse::Response::new(&mut headers);
        // Parsed before, by `read`: it parses the same again.
        let _ = res.parse(raw);
        status_line(out, self.status.as_u16(), res.reason);
        let mut dated = false;
        for h in res.headers.iter() {
            let name = h.name.as_bytes();
            let chunks =
                name.eq_ignore_ascii_case(b"transfer-encoding") && self.framing == Framing::Chunked;
            let dropped = !chunks && is_hop_by_hop(name);
            dated |= name.eq_ignore_ascii_case(b"date");
            if !dropped {
                header_line(out, name, h.value);
            }
        }
        if !dated {
            date_line(out);
        }
        if close || self.closes_caller() {
            header_line(out, b"connection", b"close");
        }
        out.extend_from_slice(b"\r\n");
    }

    /// The caller's connection ends with the body: nothing else delimits it.
    fn closes_caller(&self) -> bool {
        self.framing == Framing::UntilClose
    }
}

fn length_of(value: &[u8]) -> Result<u64, SendError> {
    length(value).ok_or_else(|| broken("a length that is not a number"))
}

fn broken(what: &str) -> SendError {
    SendError {
        connect: false,
        cause: format!("the instance sent {what}"),
    }
}

/// Sends `request` on a kept-alive connection of `pool`, or a new one, and reads the answer
/// head into `up`. A kept-alive connection the instance has closed meanwhile is dropped
/// before anything is written to it; once written, a request is not sent again (as hyper
/// and nginx do not resend what may have been acted on).
async fn exchange(
    pool: &InstancePool,
    request: &[u8],
    up: &mut BytesMut,
    head_only: bool,
) -> Result<(TcpStream, Answer), SendError> {
    let mut conn = loop {
        match pool.take_raw() {
            Some(conn) if closed(&conn) => {}
            Some(conn) => break conn,
            None => break pool.connect_raw().await?,
        }
    };
    up.clear();
    conn.write_all(request)
        .await
        .map_err(|e| SendError::http(&e))?;
    loop {
        if let Some(answer) = Answer::read(up, head_only)? {
            return Ok((conn, answer));
        }
        up.reserve(READ_ROOM);
        match conn.read_buf(up).await {
            Ok(0) => return Err(SendError::closed()),
            Ok(_) => {}
            Err(e) => return Err(SendError::http(&e)),
        }
    }
}

/// Whether a kept-alive connection has been closed by the instance (or sent something
/// unasked), as far as is known without waiting.
fn closed(conn: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    !matches!(conn.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

async fn read_more(conn: &mut TcpStream, up: &mut BytesMut) -> bool {
    up.reserve(READ_ROOM);
    matches!(conn.read_buf(up).await, Ok(n) if n > 0)
}

/// Follows a chunked body (RFC 9112 §7.1) as it passes, to tell where it ends.
#[derive(Default)]
struct Chunks {
    state: ChunkState,
    /// The line being read (a chunk size, the end of a chunk's data, a trailer).
    line: Vec<u8>,
}

#[derive(Default, Clone, Copy)]
enum ChunkState {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailers,
}

/// A chunk-size line or a trailer may not be longer than this.
const MAX_CHUNK_LINE: usize = 8 * 1024;

impl Chunks {
    /// Takes the next bytes of the body: `Some(n)` when it ends after the first `n`, `None`
    /// when it goes on past them.
    fn feed(&mut self, bytes: &[u8]) -> Result<Option<usize>, ()> {
        let mut at = 0;
        while at < bytes.len() {
            if let ChunkState::Data(left) = self.state {
                let n = left.min((bytes.len() - at) as u64);
                at += n as usize;
                self.state = match left - n {
                    0 => ChunkState::DataEnd,
                    left => ChunkState::Data(left),
                };
                continue;
            }
            let Some(nl) = bytes[at..].iter().position(|&b| b == b'\n') else {
                self.line.extend_from_slice(&bytes[at..]);
                if self.line.len() > MAX_CHUNK_LINE {
                    return Err(());
                }
                return Ok(None);
            };
            self.line.extend_from_slice(&bytes[at..at + nl]);
            at += nl + 1;
            let line = self.line.strip_suffix(b"\r").unwrap_or(&self.line);
            self.state = match self.state {
                ChunkState::Size => {
                    let digits = line.split(|&b| b == b';').next().unwrap_or_default();
                    let digits = std::str::from_utf8(digits.trim_ascii()).map_err(|_| ())?;
                    match u64::from_str_radix(digits, 16).map_err(|_| ())? {
                        0 => ChunkState::Trailers,
                        size => ChunkState::Data(size),
                    }
                }
                ChunkState::DataEnd if line.is_empty() => ChunkState::Size,
                ChunkState::DataEnd => return Err(()),
                ChunkState::Trailers if line.is_empty() => return Ok(Some(at)),
                ChunkState::Trailers => ChunkState::Trailers,
                ChunkState::Data(_) => unreachable!("data is skipped above"),
            };
            self.line.clear();
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::net::SocketAddr;

    use tokio::io::AsyncBufReadExt as _;

    use super::super::{EndpointRoute, RouteUpdate};
    use crate::DeploymentKey;
    use crate::GatewaySettings;

    /// An instance that answers by its path, over kept-alive connections: `/chunked`,
    /// `/until-close`, `/garbage`, `/drop` (closes unanswered), else 200 with the body and
    /// the head it got. It counts the connections it accepted.
    async fn instance() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut tcp = tokio::io::BufReader::new(tcp);
                    loop {
                        let mut head = String::new();
                        loop {
                            let mut line = String::new();
                            if tcp.read_line(&mut line).await.unwrap_or(0) == 0 {
                                return;
                            }
                            head.push_str(&line);
                            if line == "\r\n" {
                                break;
                            }
                        }
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .map_or(0, |n| n.parse().unwrap());
                        let mut body = vec![0u8; len];
                        tcp.read_exact(&mut body).await.unwrap();
                        let path = head.split(' ').nth(1).unwrap().to_owned();
                        let answer = match path.as_str() {
                            "/chunked" => "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
                                           3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
                                .to_owned(),
                            "/until-close" => "HTTP/1.1 200 OK\r\n\r\nall of it".to_owned(),
                            "/garbage" => "NOT HTTP\r\n\r\n".to_owned(),
                            "/drop" => return,
                            _ => {
                                let got = format!("{head}{}", String::from_utf8(body).unwrap());
                                format!(
                                    "HTTP/1.1 200 OK\r\nx-instance: 1\r\ncontent-length: {}\r\n\r\n{got}",
                                    got.len()
                                )
                            }
                        };
                        tcp.get_mut().write_all(answer.as_bytes()).await.unwrap();
                        if path == "/until-close" {
                            return;
                        }
                    }
                });
            }
        });
        (addr, accepted)
    }

    /// A gateway listener on port 0 with endpoint `e` (key `k`) on one instance.
    async fn gateway(instance: SocketAddr) -> SocketAddr {
        let dir = tempfile::tempdir().unwrap();
        let (gateway, routes) = Gateway::start(&GatewaySettings::default(), dir.keep());
        routes
            .send(RouteUpdate::Endpoint(EndpointRoute {
                name: "e".into(),
                key_hash: kep_core::secret::sha256("k"),
                http2: false,
                deployments: vec![("d".into(), 100)],
                responder: None,
            }))
            .unwrap();
        let key = DeploymentKey {
            endpoint: "e".into(),
            deployment: "d".into(),
        };
        routes
            .send(RouteUpdate::Backends {
                key,
                ready: vec![instance],
            })
            .unwrap();
        let (done, applied) = tokio::sync::oneshot::channel();
        routes.send(RouteUpdate::Applied(done)).unwrap();
        applied.await.unwrap();
        let bound = kep_core::listener::bind("gateway", "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = bound.addr;
        let stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(kep_core::listener::serve(
            bound,
            gateway.app(),
            kep_core::limits::Limits::default(),
            stop,
        ));
        addr
    }

    /// Reads one answer (its head, and its body by its length, its chunks or to the end).
    async fn read_answer(tcp: &mut tokio::io::BufReader<TcpStream>) -> (String, String) {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            assert!(
                tcp.read_line(&mut line).await.unwrap() > 0,
                "closed in {head:?}"
            );
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        let lower = head.to_ascii_lowercase();
        let mut body = Vec::new();
        if let Some(len) = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
        {
            body.resize(len.parse().unwrap(), 0);
            tcp.read_exact(&mut body).await.unwrap();
        } else if lower.contains("transfer-encoding: chunked") {
            loop {
                let mut line = String::new();
                tcp.read_line(&mut line).await.unwrap();
                body.extend_from_slice(line.as_bytes());
                if line == "\r\n" && body.ends_with(b"0\r\n\r\n") {
                    break;
                }
            }
        } else if !head.starts_with("HTTP/1.1 204") {
            tcp.read_to_end(&mut body).await.unwrap();
        }
        (head, String::from_utf8(body).unwrap())
    }

    fn post(path: &str, key: &str, body: &str) -> String {
        format!(
            "POST /endpoints/e{path} HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {key}\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    #[tokio::test]
    async fn pipelined_calls_are_forwarded_in_order_over_one_instance_connection() {
        let (up, accepted) = instance().await;
        let gw = gateway(up).await;
        let mut tcp = tokio::io::BufReader::new(TcpStream::connect(gw).await.unwrap());
        let calls = format!("{}{}", post("/a?x=1", "k", "one"), post("/b", "k", "two"));
        tcp.get_mut().write_all(calls.as_bytes()).await.unwrap();
        for (path, body) in [("/a?x=1", "one"), ("/b", "two")] {
            let (head, got) = read_answer(&mut tcp).await;
            assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
            assert!(
                head.contains("\r\nx-instance: 1\r\n") && head.contains("\r\ndate: "),
                "{head}"
            );
            assert_eq!(
                got,
                format!("POST {path} HTTP/1.1\r\nhost: {up}\r\ncontent-length: 3\r\n\r\n{body}")
            );
        }
        for _ in 0..5 {
            tcp.get_mut()
                .write_all(post("/c", "k", "").as_bytes())
                .await
                .unwrap();
            read_answer(&mut tcp).await;
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn chunked_and_until_close_answers_are_passed_on_whole() {
        let (up, _) = instance().await;
        let gw = gateway(up).await;
        let mut tcp = tokio::io::BufReader::new(TcpStream::connect(gw).await.unwrap());
        tcp.get_mut()
            .write_all(post("/chunked", "k", "").as_bytes())
            .await
            .unwrap();
        let (head, body) = read_answer(&mut tcp).await;
        assert!(head.contains("transfer-encoding: chunked"), "{head}");
        assert_eq!(body, "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
        // The same connection goes on, and then ends with an answer only its end delimits.
        tcp.get_mut()
            .write_all(post("/until-close", "k", "").as_bytes())
            .await
            .unwrap();
        let (head, body) = read_answer(&mut tcp).await;
        assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
        assert_eq!(body, "all of it");
    }

    #[tokio::test]
    async fn an_instance_that_breaks_off_is_a_502_and_the_connection_goes_on() {
        let (up, _) = instance().await;
        let gw = gateway(up).await;
        let mut tcp = tokio::io::BufReader::new(TcpStream::connect(gw).await.unwrap());
        for path in ["/garbage", "/drop"] {
            tcp.get_mut()
                .write_all(post(path, "k", "x").as_bytes())
                .await
                .unwrap();
            let (head, body) = read_answer(&mut tcp).await;
            assert!(head.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{head}");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert!(
                v["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("deployment d"),
                "{v}"
            );
        }
        tcp.get_mut()
            .write_all(post("/ok", "k", "").as_bytes())
            .await
            .unwrap();
        assert!(read_answer(&mut tcp).await.0.starts_with("HTTP/1.1 200"));
    }

    #[tokio::test]
    async fn a_call_the_fast_path_does_not_take_is_answered_by_hyper_on_the_same_connection() {
        let (up, _) = instance().await;
        let gw = gateway(up).await;
        let mut tcp = tokio::io::BufReader::new(TcpStream::connect(gw).await.unwrap());
        tcp.get_mut()
            .write_all(post("/fast", "k", "1").as_bytes())
            .await
            .unwrap();
        assert!(read_answer(&mut tcp).await.0.starts_with("HTTP/1.1 200"));
        // A wrong key, then a chunked body, then a plain call again: all after the handover.
        tcp.get_mut()
            .write_all(post("/x", "wrong", "").as_bytes())
            .await
            .unwrap();
        let (head, body) = read_answer(&mut tcp).await;
        assert!(head.starts_with("HTTP/1.1 401"), "{head}");
        assert!(body.contains("unauthorized"), "{body}");
        let chunked = "POST /endpoints/e/c HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer k\r\n\
                       transfer-encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n";
        tcp.get_mut().write_all(chunked.as_bytes()).await.unwrap();
        let (head, body) = read_answer(&mut tcp).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(
            body.contains("content-length: 2\r\n") && body.ends_with("\r\n\r\nhi"),
            "{body}"
        );
        tcp.get_mut()
            .write_all(post("/again", "k", "").as_bytes())
            .await
            .unwrap();
        assert!(read_answer(&mut tcp).await.0.starts_with("HTTP/1.1 200"));
    }

    #[tokio::test]
    async fn a_head_call_gets_the_head_only_and_connection_close_ends_the_connection() {
        let (up, _) = instance().await;
        let gw = gateway(up).await;
        let mut tcp = tokio::io::BufReader::new(TcpStream::connect(gw).await.unwrap());
        let head_call = "HEAD /endpoints/e/h HTTP/1.1\r\nauthorization: Bearer k\r\n\r\n";
        tcp.get_mut().write_all(head_call.as_bytes()).await.unwrap();
        let mut head = String::new();
        while !head.ends_with("\r\n\r\n") {
            tcp.read_line(&mut head).await.unwrap();
        }
        assert!(
            head.starts_with("HTTP/1.1 200") && head.contains("content-length: "),
            "{head}"
        );
        let close =
            "GET /endpoints/e/c HTTP/1.1\r\nauthorization: Bearer k\r\nconnection: close\r\n\r\n";
        tcp.get_mut().write_all(close.as_bytes()).await.unwrap();
        let (head, body) = read_answer(&mut tcp).await;
        assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
        assert!(
            body.starts_with("GET /c HTTP/1.1\r\n"),
            "the HEAD left no body behind: {body}"
        );
        let mut rest = Vec::new();
        tcp.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }

    fn call(head: &str, max_body: u64) -> Option<(String, Option<String>, u64, bool)> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        req.parse(head.as_bytes()).unwrap();
        Call::read(&req, max_body).map(|c| {
            (
                c.endpoint.to_owned(),
                c.target.1.map(str::to_owned),
                c.body_len,
                c.close,
            )
        })
    }

    #[test]
    fn plain_calls_take_the_fast_path_and_the_rest_go_to_hyper() {
        let fast = |h: &str| {
            call(
                &format!("POST /endpoints/e/v1/x?a=1 HTTP/1.1\r\n{h}\r\n"),
                100,
            )
        };
        assert_eq!(
            fast("content-length: 100\r\nconnection: keep-alive, Close\r\n"),
            Some(("e".into(), Some("a=1".into()), 100, true))
        );
        assert!(
            fast("content-length: 101\r\n").is_none(),
            "over the body limit"
        );
        assert!(fast("content-length: 1\r\ncontent-length: 2\r\n").is_none());
        assert!(fast("content-length: +1\r\n").is_none());
        for other in [
            "transfer-encoding: chunked",
            "expect: 100-continue",
            "upgrade: websocket",
            "connection: x-private",
        ] {
            assert!(fast(&format!("{other}\r\n")).is_none(), "{other}");
        }
        assert!(call("GET /endpoints/e HTTP/1.0\r\n\r\n", 100).is_none());
        assert!(call("GET /other/e HTTP/1.1\r\n\r\n", 100).is_none());
        assert!(call("GET /endpoints/e/a\"b HTTP/1.1\r\n\r\n", 100).is_none());
        assert!(call("GET http://h/endpoints/e/ HTTP/1.1\r\n\r\n", 100).is_none());
    }

    #[test]
    fn the_instance_gets_its_own_host_and_length_and_no_key_or_hop_headers() {
        let head = "POST /endpoints/e/v1/x?a=1 HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer k\r\n\
                    Content-Length: 2\r\nConnection: keep-alive\r\nTE: trailers\r\nX-Id: 7\r\n\r\n";
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        req.parse(head.as_bytes()).unwrap();
        let c = Call::read(&req, 100).unwrap();
        let mut out = Vec::new();
        c.write_upstream(&req, b"127.0.0.1:9", b"hi", &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /v1/x?a=1 HTTP/1.1\r\nhost: 127.0.0.1:9\r\nTE: trailers\r\nX-Id: 7\r\n\
             content-length: 2\r\n\r\nhi"
        );
    }

    fn answer(raw: &str, head_only: bool) -> Result<Option<Answer>, SendError> {
        Answer::read(&mut BytesMut::from(raw), head_only)
    }

    #[test]
    fn answers_are_framed_as_rfc_9112_says() {
        let framing = |raw: &str| answer(raw, false).unwrap().unwrap().framing;
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"),
            Framing::Length(5)
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
            Framing::Empty
        );
        assert_eq!(framing("HTTP/1.1 204 No Content\r\n\r\n"), Framing::Empty);
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n"),
            Framing::Chunked
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n"),
            Framing::UntilClose
        );
        assert_eq!(framing("HTTP/1.0 200 OK\r\n\r\n"), Framing::UntilClose);
        let head = answer("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", true)
            .unwrap()
            .unwrap();
        assert_eq!(head.framing, Framing::Empty);
        // An interim answer is skipped.
        let a = answer(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 1\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(a.status, 201);
        assert!(a.reusable);
        let a = answer(
            "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 1\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(!a.reusable);
        assert!(
            answer("HTTP/1.1 200 OK\r\ncontent-le", false)
                .unwrap()
                .is_none()
        );
        for bad in [
            "HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n",
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "NOT HTTP\r\n\r\n",
        ] {
            assert!(answer(bad, false).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_caller_gets_the_head_without_hop_headers_and_with_a_date() {
        let raw = "HTTP/1.0 200 Fine\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nX-A: 1\r\n\r\n";
        let a = answer(raw, false).unwrap().unwrap();
        let mut out = Vec::new();
        a.write_head(raw.as_bytes(), false, &mut out);
        let head = String::from_utf8(out).unwrap();
        assert!(
            head.starts_with("HTTP/1.1 200 Fine\r\nX-A: 1\r\ndate: "),
            "{head}"
        );
        assert!(
            head.ends_with("\r\nconnection: close\r\n\r\n"),
            "until close: {head}"
        );
        let raw = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nDate: x\r\n\r\n";
        let a = answer(raw, false).unwrap().unwrap();
        let mut out = Vec::new();
        a.write_head(raw.as_bytes(), false, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nDate: x\r\n\r\n"
        );
    }

    #[test]
    fn a_chunked_body_ends_after_its_last_chunk_and_trailers_in_any_split() {
        let body =
            b"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nx-t: 1\r\n\r\nEXTRA";
        let end = body.len() - "EXTRA".len();
        for split in 0..body.len() {
            let mut chunks = Chunks::default();
            let first = chunks.feed(&body[..split]).unwrap();
            let ended = match first {
                Some(n) => n,
                None => split + chunks.feed(&body[split..]).unwrap().unwrap(),
            };
            assert_eq!(ended, end, "split at {split}");
        }
        for bad in [&b"zz\r\n"[..], b"1\r\nab\r\n", b"1\r\naXX\r\n"] {
            assert!(Chunks::default().feed(bad).is_err(), "{bad:?}");
        }
        assert!(Chunks::default().feed(&[b'1'; MAX_CHUNK_LINE + 1]).is_err());
    }
}
