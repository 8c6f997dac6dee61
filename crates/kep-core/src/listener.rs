//! Listeners: binding (port 0 included), the address book, the operator token file,
//! serving with graceful shutdown and the limits of [`Limits`], and the process's stop
//! signals.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::{CancellationToken, PollSemaphore};
use tokio_util::task::TaskTracker;
use tower::Service as _;
use tower_http::timeout::TimeoutBody;

use crate::limits::Limits;

/// A bound listener and the address it got.
pub struct Bound {
    pub listener: TcpListener,
    pub addr: SocketAddr,
}

pub async fn bind(name: &str, addr: SocketAddr) -> anyhow::Result<Bound> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the {name} listener to {addr}"))?;
    let addr = listener.local_addr()?;
    Ok(Bound { listener, addr })
}

/// The URL the server hands out for a listener: the configured one, else its own address.
pub fn public_url(configured: Option<&str>, addr: SocketAddr) -> String {
    match configured {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => format!("http://{addr}"),
    }
}

/// Writes `<data-dir>/addresses.json`: `{"admin": "127.0.0.1:8800", …}`.
pub fn write_addresses(data_dir: &Path, addrs: &BTreeMap<&str, SocketAddr>) -> anyhow::Result<()> {
    let path = data_dir.join("addresses.json");
    let tmp = data_dir.join("addresses.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(addrs)?)?;
    // A rename, so a reader polling for the file never sees half of it.
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))
}

/// The operator token: the configured one, else the one in `<data-dir>/admin-token`, else a
/// new one written there with mode 0600. The flag says whether it was just generated (and
/// so must be printed once).
pub fn operator_token(data_dir: &Path, configured: Option<&str>) -> anyhow::Result<(String, bool)> {
    if let Some(t) = configured.filter(|t| !t.is_empty()) {
        return Ok((t.to_owned(), false));
    }
    let path = data_dir.join("admin-token");
    if let Ok(existing) = std::fs::read_to_string(&path) {
        let existing = existing.trim();
        if !existing.is_empty() {
            return Ok((existing.to_owned(), false));
        }
    }
    let token = crate::secret::new_secret();
    std::fs::create_dir_all(data_dir)?;
    write_private(&path, token.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok((token, true))
}

/// Writes a file only its owner may read (mode 0600): tokens and secrets.
pub fn write_private(path: &Path, content: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(content)
}

/// Serves `app` until `shutdown` fires, then lets in-flight requests finish; HTTP/1.1,
/// HTTP/2 with prior knowledge, and upgrades (the WebSocket). `limits` bounds what clients
/// can hold: at most `max_connections` connections at once (an upgraded one included), a
/// request head of at most `max_header_bytes` within `header_read_timeout_s` (also the
/// longest a connection may sit idle between requests), no pause longer than
/// `body_read_timeout_s` within a body, and `body_memory_bytes` of bodies being received
/// ([`Charged`]). Every request carries its peer's address (`ConnectInfo<SocketAddr>`,
/// read by [`crate::limits::Peer`]).
pub async fn serve(
    bound: Bound,
    app: impl Into<App>,
    limits: Limits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let App {
        router,
        front,
        workers,
    } = app.into();
    let timeout = |s: u64| (s > 0).then(|| Duration::from_secs(s));
    // hyper's floor: its buffer must hold the smallest head it reads.
    let max_head = limits.max_header_bytes.max(8192);
    let conn = ConnectionLimits {
        head: timeout(limits.header_read_timeout_s),
        body: timeout(limits.body_read_timeout_s),
        memory: BodyMemory::new(limits.body_memory_bytes),
        max_head: max_head as usize,
    };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(conn.head)
        .max_buf_size(max_head as usize);
    builder.http2().max_header_list_size(max_head);
    let acceptor = Acceptor {
        builder: Arc::new(builder),
        slots: (limits.max_connections > 0)
            .then(|| Arc::new(Semaphore::new(limits.max_connections as usize))),
        front,
        router,
        conn,
        shutdown,
        share: None,
    };
    if workers == 0 {
        acceptor.accept(&bound.listener).await;
        return Ok(());
    }
    // Each worker accepts from the same socket and serves what it accepted on its own
    // thread: a connection never moves between threads, and no thread wakes another.
    let listener = bound.listener.into_std()?;
    let share = Arc::new(Share {
        open: (0..workers).map(|_| AtomicUsize::new(0)).collect(),
        changed: Notify::new(),
    });
    let mut done = Vec::with_capacity(workers);
    for id in 1..=workers {
        let (listener, mut acceptor) = (listener.try_clone()?, acceptor.clone());
        acceptor.share = Some((Arc::clone(&share), id - 1));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        done.push(rx);
        std::thread::Builder::new()
            .name(format!("kep-worker-{id}"))
            .spawn(move || {
                WORKER.set(id);
                runtime.block_on(async move {
                    match TcpListener::from_std(listener) {
                        Ok(listener) => acceptor.accept(&listener).await,
                        Err(e) => tracing::error!(error = %e, "a worker could not listen"),
                    }
                    drop(tx);
                });
            })?;
    }
    for rx in done {
        let _ = rx.await;
    }
    Ok(())
}

thread_local! {
    static WORKER: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Which of a listener's worker threads runs the caller (1, 2 …), or 0 outside them: what
/// a connection to another server made on one worker is kept for (it is registered with
/// that worker's runtime).
pub fn worker() -> usize {
    WORKER.get()
}

/// What accepts a listener's connections and serves them.
#[derive(Clone)]
struct Acceptor {
    builder: Arc<auto::Builder<TokioExecutor>>,
    slots: Option<Arc<Semaphore>>,
    front: Option<Arc<dyn Front>>,
    router: Router,
    conn: ConnectionLimits,
    shutdown: CancellationToken,
    /// A worker's place among its listener's workers.
    share: Option<(Arc<Share>, usize)>,
}

/// The connections each worker of a listener has open. A worker accepts only while it has
/// no more than the fewest: a burst of connections (a load tool's, a client pool's) is
/// dealt out evenly rather than taken by whichever thread woke first.
struct Share {
    open: Box<[AtomicUsize]>,
    changed: Notify,
}

impl Share {
    async fn my_turn(&self, me: usize) {
        loop {
            // Registered before the counts are read, so no change between goes unseen.
            let changed = self.changed.notified();
            let fewest = self.open.iter().map(|n| n.load(Ordering::Acquire)).min();
            if fewest.is_none_or(|fewest| self.open[me].load(Ordering::Acquire) <= fewest) {
                return;
            }
            changed.await;
        }
    }

    fn add(self: &Arc<Self>, me: usize) -> Opened {
        self.open[me].fetch_add(1, Ordering::AcqRel);
        self.changed.notify_waiters();
        Opened(Arc::clone(self), me)
    }
}

/// A worker's count of one open connection.
struct Opened(Arc<Share>, usize);

impl Drop for Opened {
    fn drop(&mut self) {
        self.0.open[self.1].fetch_sub(1, Ordering::AcqRel);
        self.0.changed.notify_waiters();
    }
}

impl Acceptor {
    /// Accepts until `shutdown` fires, then waits for the connections it accepted.
    async fn accept(self, listener: &TcpListener) {
        let connections = TaskTracker::new();
        loop {
            if let Some((share, me)) = &self.share {
                tokio::select! {
                    biased;
                    _ = self.shutdown.cancelled() => break,
                    () = share.my_turn(*me) => {}
                }
            }
            // A slot first, so that past the limit connections wait in the accept queue.
            let slot = match &self.slots {
                Some(slots) => tokio::select! {
                    biased;
                    _ = self.shutdown.cancelled() => break,
                    slot = Arc::clone(slots).acquire_owned() => Some(slot.expect("never closed")),
                },
                None => None,
            };
            let (tcp, peer) = tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        accept_failed(e).await;
                        continue;
                    }
                },
            };
            // Events and answers are small writes: Nagle's algorithm would hold them back.
            let _ = tcp.set_nodelay(true);
            let io = Connection {
                tcp: Some(tcp),
                slot,
                opened: self.share.as_ref().map(|(share, me)| share.add(*me)),
            };
            connections.spawn(connection(
                Arc::clone(&self.builder),
                (io, peer),
                self.front.clone(),
                self.router.clone(),
                self.conn.clone(),
                self.shutdown.clone(),
            ));
        }
        connections.close();
        connections.wait().await;
    }
}

#[derive(Clone)]
struct ConnectionLimits {
    head: Option<Duration>,
    body: Option<Duration>,
    memory: Option<BodyMemory>,
    max_head: usize,
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
async fn connection(
    builder: Arc<auto::Builder<TokioExecutor>>,
    (io, peer): (Connection, SocketAddr),
    front: Option<Arc<dyn Front>>,
    router: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
    let io = match front {
        None => Replayed {
            read: Bytes::new(),
            io,
        },
        Some(front) => {
            let at = FrontLimits {
                head_timeout: limits.head,
                body_timeout: limits.body,
                max_head: limits.max_head,
                shutdown: shutdown.clone(),
            };
            match front.serve(io, at).await {
                Some(Handover { io, read }) => Replayed { read, io },
                None => return,
            }
        }
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
            async move {
                let mut res = answer.await?;
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

/// The memory a listener's request bodies share, in KiB permits.
#[derive(Clone)]
struct BodyMemory {
    kib: Arc<Semaphore>,
    /// The most one request counts, in KiB: a body streamed to disk (an upload of
    /// gigabytes) must not wait for more than there is.
    most: u32,
}

/// What each body may hold before it counts: about what hyper buffers per connection.
const UNCOUNTED_BYTES: u64 = 64 * 1024;

impl BodyMemory {
    fn new(bytes: u64) -> Option<Self> {
        let kib = u32::try_from(bytes / 1024).unwrap_or(u32::MAX);
        (kib > 0).then(|| BodyMemory {
            kib: Arc::new(Semaphore::new(kib as usize)),
            most: (kib / 4).max(1),
        })
    }

    /// `body`, charged for what it will hold past its uncounted bytes: its `declared`
    /// length, or, with none, as much as one body may count.
    fn charge(&self, body: Body, declared: Option<u64>) -> Charged {
        let due = match declared {
            Some(len) => u32::try_from(len.saturating_sub(UNCOUNTED_BYTES).div_ceil(1024))
                .unwrap_or(u32::MAX)
                .min(self.most),
            None => self.most,
        };
        Charged {
            body,
            memory: PollSemaphore::new(Arc::clone(&self.kib)),
            due,
            received: 0,
            held: None,
            unpaid: None,
        }
    }
}

/// A request body that takes its share of the listener's body memory once, whole, when it
/// passes its uncounted bytes, and holds it until it is dropped (read whole, or
/// abandoned). A body that finds the memory spent waits with the piece that passed, and
/// hyper reads no more from its connection meanwhile. Since no body holds part of a share
/// while it waits for the rest, bodies cannot block each other for good: every holder is
/// being read, and so ends within the body timeout.
struct Charged {
    body: Body,
    memory: PollSemaphore,
    /// The KiB to take when the body passes its uncounted bytes.
    due: u32,
    received: u64,
    held: Option<OwnedSemaphorePermit>,
    /// The piece that passed the uncounted bytes, until the share is taken.
    unpaid: Option<http_body::Frame<axum::body::Bytes>>,
}

impl http_body::Body for Charged {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        if let Some(frame) = this.unpaid.take() {
            match this.memory.poll_acquire_many(cx, this.due) {
                Poll::Pending => {
                    this.unpaid = Some(frame);
                    return Poll::Pending;
                }
                Poll::Ready(share) => this.held = share,
            }
            return Poll::Ready(Some(Ok(frame)));
        }
        match std::task::ready!(Pin::new(&mut this.body).poll_frame(cx)) {
            Some(Ok(frame)) => {
                this.received += frame.data_ref().map_or(0, |d| d.len() as u64);
                if this.received > UNCOUNTED_BYTES && this.due > 0 && this.held.is_none() {
                    this.unpaid = Some(frame);
                    return self.poll_frame(cx);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            end => Poll::Ready(end),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.unpaid.is_none() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match &self.unpaid {
            None => self.body.size_hint(),
            Some(_) => http_body::SizeHint::default(),
        }
    }
}

/// A request body that records when it has been read to its end.
struct Tracked {
    body: Body,
    ended: Arc<AtomicBool>,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let frame = std::task::ready!(Pin::new(&mut self.body).poll_frame(cx));
        if frame.is_none() || self.body.is_end_stream() {
            self.ended.store(true, Ordering::Release);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// What a listener serves: its routes, optionally a [`Front`] that reads each connection
/// first, and on how many threads.
pub struct App {
    pub router: Router,
    pub front: Option<Arc<dyn Front>>,
    /// Threads of the listener's own, each running its connections on a runtime of its
    /// own, as nginx's worker processes do; 0: the connections are tasks of the caller's
    /// runtime.
    pub workers: usize,
}

impl From<Router> for App {
    fn from(router: Router) -> App {
        App {
            router,
            front: None,
            workers: 0,
        }
    }
}

/// A listener's own server for the requests it can answer faster than the router (the
/// gateway's plain HTTP/1.1 calls): it serves a connection for as long as it can, then
/// hands it over, with what it read and did not answer, for hyper and the router to serve
/// the rest. It keeps to the listener's limits as hyper does.
pub trait Front: Send + Sync + 'static {
    /// Serves `io` until it is closed (`None`) or handed over.
    fn serve(
        self: Arc<Self>,
        io: Connection,
        limits: FrontLimits,
    ) -> Pin<Box<dyn Future<Output = Option<Handover>> + Send>>;
}

/// The listener's limits, as a [`Front`] must keep them.
pub struct FrontLimits {
    /// For a request's head to arrive whole, and for a kept-alive connection to start one.
    pub head_timeout: Option<Duration>,
    /// The longest a request body may send nothing.
    pub body_timeout: Option<Duration>,
    /// The longest request head; a longer one is handed over (hyper answers 431).
    pub max_head: usize,
    /// Fired when the listener stops: finish the request under way, start no other.
    pub shutdown: CancellationToken,
}

/// A connection a [`Front`] hands over, with the bytes it read and did not answer.
pub struct Handover {
    pub io: Connection,
    pub read: Bytes,
}

/// A connection's socket, holding its listener slot until it is closed: after an upgrade
/// the WebSocket owns it, so an upgraded connection keeps counting.
pub struct Connection {
    /// Taken only when the connection is dropped, to close it lingering.
    tcp: Option<TcpStream>,
    slot: Option<OwnedSemaphorePermit>,
    opened: Option<Opened>,
}

impl Connection {
    pub fn stream(&mut self) -> &mut TcpStream {
        self.tcp
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
        let (Some(mut tcp), Ok(runtime)) = (self.tcp.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
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
struct Replayed {
    read: Bytes,
    io: Connection,
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
        Pin::new(self.get_mut().io.stream()).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(self.get_mut().io.stream()).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io
            .tcp
            .as_ref()
            .is_some_and(TcpStream::is_write_vectored)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(self.get_mut().io.stream()).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(self.get_mut().io.stream()).poll_shutdown(cx)
    }
}

/// A refused or reset connection is the peer's business; anything else (out of file
/// descriptors, say) is logged and retried after a second, as hyper's own server did.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Resolves on SIGINT or SIGTERM.
pub async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_token_is_generated_once_with_mode_0600() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let (t1, generated) = operator_token(dir.path(), None).unwrap();
        assert!(generated);
        let mode = std::fs::metadata(dir.path().join("admin-token"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let (t2, generated) = operator_token(dir.path(), None).unwrap();
        assert!(!generated);
        assert_eq!(t1, t2);
        let (t3, _) = operator_token(dir.path(), Some("configured")).unwrap();
        assert_eq!(t3, "configured");
    }

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// A server of `POST /` (the body's length) on port 0 with `limits`; its address.
    async fn server(limits: Limits) -> (SocketAddr, CancellationToken) {
        let router = Router::new().route(
            "/",
            axum::routing::post(|body: axum::body::Bytes| async move { body.len().to_string() }),
        );
        let bound = bind("test", "127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = bound.addr;
        let stop = CancellationToken::new();
        tokio::spawn(serve(bound, router, limits, stop.clone()));
        (addr, stop)
    }

    /// Whatever the server sends until it closes the connection (a minute at most: a
    /// server that never closes fails the test).
    async fn until_closed(tcp: &mut TcpStream) -> String {
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(60), tcp.read_to_end(&mut got));
        // A reset (the server closed with unread bytes) also ends the connection.
        let _ = read.await.expect("the server closes the connection");
        String::from_utf8_lossy(&got).into_owned()
    }

    const POST: &[u8] = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nhi";

    #[tokio::test]
    async fn a_head_sent_a_byte_at_a_time_or_not_at_all_is_cut_off() {
        let (addr, _stop) = server(Limits {
            header_read_timeout_s: 1,
            ..Limits::default()
        })
        .await;
        // Nothing at all: not even the bytes that tell HTTP/1 from HTTP/2.
        let mut silent = TcpStream::connect(addr).await.unwrap();
        // The head a byte at a time, never finished (slowloris).
        let mut slow = TcpStream::connect(addr).await.unwrap();
        let trickle = async {
            for b in b"POST / HTTP/1.1\r\nhost: x\r\nx-a: ".iter().cycle() {
                if slow.write_all(&[*b]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), trickle)
            .await
            .expect("the server stops the trickle");
        until_closed(&mut slow).await;
        assert_eq!(until_closed(&mut silent).await, "");
        // A client that sends its request in time is served.
        let mut prompt = TcpStream::connect(addr).await.unwrap();
        prompt.write_all(POST).await.unwrap();
        let answer = until_closed(&mut prompt).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("\r\n\r\n2"), "{answer}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_before_the_body_is_read_reaches_a_client_still_sending() {
        let (addr, _stop) = server(Limits::default()).await;
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (mut rx, mut tx) = tcp.into_split();
        // Over axum's 2 MB body limit: refused with a 413 before the body is read.
        tx.write_all(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 52428800\r\n\r\n")
            .await
            .unwrap();
        // A client such as hyper's sends its body whole before it reads the answer, and
        // gives up on a write that fails.
        let sending = tokio::spawn(async move {
            let chunk = vec![0u8; 64 * 1024];
            for _ in 0..128 {
                tx.write_all(&chunk).await?;
            }
            std::io::Result::Ok(())
        });
        sending
            .await
            .unwrap()
            .expect("the body is taken while the answer waits");
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match rx.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => panic!("the answer was lost: {e}"),
            }
        }
        let answer = String::from_utf8_lossy(&got);
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        // The client is told not to send another request down this connection.
        assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
    }

    #[tokio::test]
    async fn a_call_whose_body_was_read_whole_keeps_the_connection() {
        let (addr, _stop) = server(Limits::default()).await;
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        for _ in 0..2 {
            tcp.write_all(POST).await.unwrap();
            got.clear();
            while !got.ends_with(b"\r\n\r\n2") {
                let n = tcp.read(&mut buf).await.unwrap();
                assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&buf[..n]);
            }
            let answer = String::from_utf8_lossy(&got);
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            assert!(!answer.contains("connection: close"), "{answer}");
        }
    }

    #[tokio::test]
    async fn a_body_that_stops_is_cut_off() {
        let (addr, _stop) = server(Limits {
            body_read_timeout_s: 1,
            ..Limits::default()
        })
        .await;
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nfive!")
            .await
            .unwrap();
        let answer = until_closed(&mut tcp).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    }

    #[tokio::test]
    async fn past_max_connections_a_connection_waits_for_a_slot() {
        let (addr, _stop) = server(Limits {
            max_connections: 2,
            header_read_timeout_s: 0,
            ..Limits::default()
        })
        .await;
        let mut first = TcpStream::connect(addr).await.unwrap();
        let _second = TcpStream::connect(addr).await.unwrap();
        // The kernel completes the third connection, but the server takes it only when a
        // slot is free.
        let mut third = TcpStream::connect(addr).await.unwrap();
        third.write_all(POST).await.unwrap();
        let mut byte = [0u8; 1];
        let early = tokio::time::timeout(Duration::from_millis(500), third.read(&mut byte)).await;
        assert!(early.is_err(), "answered while two connections were open");
        first.write_all(POST).await.unwrap();
        first.shutdown().await.unwrap();
        until_closed(&mut first).await;
        drop(first);
        third.shutdown().await.unwrap();
        let answer = until_closed(&mut third).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    #[tokio::test]
    async fn a_head_over_its_limit_is_a_431() {
        let (addr, _stop) = server(Limits {
            max_header_bytes: 8192,
            ..Limits::default()
        })
        .await;
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        let fat = "x-fat: 0123456789abcdef0123456789abcdef\r\n".repeat(256);
        tcp.write_all(format!("POST / HTTP/1.1\r\nhost: x\r\n{fat}").as_bytes())
            .await
            .unwrap();
        let answer = until_closed(&mut tcp).await;
        assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    }

    /// A body whose first piece is `len` bytes and that then never ends.
    fn endless(len: usize) -> Body {
        let first = futures_util::stream::iter([Ok::<_, std::io::Error>(vec![0u8; len])]);
        Body::from_stream(futures_util::StreamExt::chain(
            first,
            futures_util::stream::pending(),
        ))
    }

    fn poll(
        body: &mut Charged,
    ) -> Poll<Option<Result<http_body::Frame<axum::body::Bytes>, axum::Error>>> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        http_body::Body::poll_frame(Pin::new(body), &mut cx)
    }

    #[tokio::test]
    async fn bodies_past_the_listeners_body_memory_wait_for_it() {
        const KIB: usize = 1024;
        // 256 KiB in all; one body counts at most 64 KiB, past its first 64 KiB.
        let memory = BodyMemory::new(256 * 1024).unwrap();
        let mut held: Vec<Charged> = (0..4)
            .map(|_| memory.charge(endless(192 * KIB), None))
            .collect();
        for body in &mut held {
            assert!(matches!(poll(body), Poll::Ready(Some(Ok(_)))));
        }
        // The memory is spent: a body past its uncounted 64 KiB waits, a small one does not.
        let mut big = memory.charge(endless(100 * KIB), None);
        assert!(poll(&mut big).is_pending());
        let mut small = memory.charge(endless(60 * KIB), None);
        assert!(matches!(poll(&mut small), Poll::Ready(Some(Ok(_)))));
        // A body done with gives its share back.
        held.pop();
        let frame = http_body_util::BodyExt::frame(&mut big)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(frame.into_data().unwrap().len(), 100 * KIB);
        // A body of a declared length takes only what it will hold: 100 KiB is 36 KiB past
        // the uncounted 64.
        drop((big, held));
        let mut declared = memory.charge(Body::from(vec![0u8; 100 * KIB]), Some(100 * 1024));
        assert!(matches!(poll(&mut declared), Poll::Ready(Some(Ok(_)))));
        assert_eq!(memory.kib.available_permits(), 256 - 36);
    }

    #[tokio::test]
    async fn a_worker_accepts_only_while_it_has_the_fewest_connections() {
        use futures_util::FutureExt as _;
        let share = Arc::new(Share {
            open: (0..2).map(|_| AtomicUsize::new(0)).collect(),
            changed: Notify::new(),
        });
        let first = share.add(0);
        assert!(share.my_turn(1).now_or_never().is_some());
        let mut second = Box::pin(share.my_turn(0));
        assert!((&mut second).now_or_never().is_none(), "worker 0 has more");
        // The other worker's next connection, or the end of this one, gives it its turn.
        let other = share.add(1);
        second.await;
        drop(other);
        assert!(share.my_turn(0).now_or_never().is_none());
        drop(first);
        assert!(share.my_turn(0).now_or_never().is_some());
    }

    #[test]
    fn public_url_defaults_to_the_listener() {
        let addr: SocketAddr = "127.0.0.1:9000".parse().unwrap();
        assert_eq!(public_url(None, addr), "http://127.0.0.1:9000");
        assert_eq!(
            public_url(Some("https://live.example/"), addr),
            "https://live.example"
        );
    }
}
