//! The inference gateway, the data plane of model serving: `/endpoints/{endpoint}/{path…}`
//! with the endpoint's API key, a weighted choice of deployment, round robin over its ready
//! instances, mirroring, and proxying over kept-alive connections (an HTTP/1.1 fast path
//! in front of hyper, [`h1`]). It learns endpoints from the control plane and ready
//! instances from the runtime, both through [`RouteUpdate`]s, and counts calls in its
//! [`meter::Meters`], which the monitor reads. It knows nothing of the management API.

mod body;
mod broadcast;
mod error;
mod h1;
mod http2;
pub mod meter;
mod pool;
mod route;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::uri::PathAndQuery;
use axum::http::{HeaderMap, HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use kep_core::limits::{Key, Limiter, Limits, Peer};
use kep_core::listener::Front;
use kep_core::service::Context;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use crate::meter::{Meter, Meters};
use body::{BodyLimits, Held, ProxyBody};
pub use error::{GatewayError, Shape};
pub use h1::parsers;
use pool::{InstancePool, PoolSettings, SendError};
pub use route::EndpointRoute;
use route::{Choice, Instance, Route, Table};

/// Kept-alive connections per instance beyond this many idle ones are closed.
const MAX_IDLE_PER_INSTANCE: usize = 1024;

/// `[gateway]` settings: the listener of endpoint calls (CONTRACT §0, §3).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct GatewaySettings {
    pub addr: SocketAddr,
    /// Base of the endpoint URLs handed out; the listener's own address when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
    /// Proxy body size: a larger request body is 413.
    pub max_body_bytes: u64,
    /// Client body buffer size: a larger body is spooled to disk.
    pub body_buffer_bytes: u64,
    pub connect_timeout_s: u64,
    /// How long an instance may take to start answering.
    pub upstream_timeout_s: u64,
    /// How long an unused kept-alive HTTP/1.1 connection to an instance stays open.
    pub pool_idle_timeout_s: u64,
    /// Whether calls are counted: off, the monitoring numbers of calls stay at zero and the
    /// QPS and status alerts never fire.
    pub metrics: bool,
    /// Plain HTTP/1.1 calls take the hand-written fast path ([`h1`]); off, hyper and the
    /// router serve every call (to rule the fast path out when something looks wrong).
    pub fast_path: bool,
    /// Per endpoint (its API key), else per peer address.
    #[serde(flatten)]
    pub limits: Limits,
}

impl Default for GatewaySettings {
    fn default() -> Self {
        GatewaySettings {
            addr: SocketAddr::from(([127, 0, 0, 1], 8804)),
            public_url: None,
            max_body_bytes: 20 * 1024 * 1024,
            body_buffer_bytes: 10 * 1024 * 1024,
            connect_timeout_s: 5,
            upstream_timeout_s: 60,
            pool_idle_timeout_s: 90,
            metrics: true,
            fast_path: true,
            // Clients wait on slow models with their connections open.
            limits: Limits {
                max_connections: 2048,
                ..Limits::default()
            },
        }
    }
}

/// A deployment of an endpoint, as routes and meters name it.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct DeploymentKey {
    pub endpoint: String,
    pub deployment: String,
}

/// What the control plane and the runtime tell the gateway.
#[derive(Debug)]
pub enum RouteUpdate {
    Endpoint(EndpointRoute),
    EndpointRemoved(String),
    Backends {
        key: DeploymentKey,
        ready: Vec<SocketAddr>,
    },
    /// Answered once every update sent before it is in effect.
    Applied(tokio::sync::oneshot::Sender<()>),
}

pub struct Gateway {
    table: ArcSwap<Table>,
    pools: PoolSettings,
    limits: BodyLimits,
    timeout: Duration,
    spool: PathBuf,
    meters: Arc<Meters>,
    /// Whether calls are counted (`gateway.metrics`).
    metered: bool,
    /// Whether plain calls take the fast path (`gateway.fast_path`).
    fast_path: bool,
    limiter: Limiter,
    /// Where mirrored calls run.
    mirrors: TaskTracker,
}

impl Gateway {
    /// The gateway, and the sender its routing updates go to. Its tasks (the routing
    /// updates, mirrored calls) run on the service's tracker.
    pub fn start(
        settings: &GatewaySettings,
        spool: PathBuf,
        ctx: &Context,
    ) -> (Arc<Gateway>, mpsc::UnboundedSender<RouteUpdate>) {
        let gateway = Arc::new(Gateway {
            table: ArcSwap::from_pointee(Table::default()),
            pools: PoolSettings {
                connect_timeout: Duration::from_secs(settings.connect_timeout_s),
                idle_timeout: Duration::from_secs(settings.pool_idle_timeout_s),
                max_idle: MAX_IDLE_PER_INSTANCE,
                workers: workers(),
            },
            limits: BodyLimits {
                max_body: settings.max_body_bytes,
                buffer: settings.body_buffer_bytes,
            },
            timeout: Duration::from_secs(settings.upstream_timeout_s),
            spool,
            meters: Arc::default(),
            metered: settings.metrics,
            fast_path: settings.fast_path,
            limiter: Limiter::new(&settings.limits),
            mirrors: ctx.tasks.clone(),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        ctx.spawn(Arc::clone(&gateway).route_updates(rx));
        (gateway, tx)
    }

    /// Keeps the table current: each update rebuilds the one endpoint it touches.
    async fn route_updates(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<RouteUpdate>) {
        let mut configs: HashMap<String, EndpointRoute> = HashMap::new();
        let mut ready: HashMap<DeploymentKey, Vec<SocketAddr>> = HashMap::new();
        // Kept across rebuilds, so a change elsewhere does not drop an instance's connections.
        let mut pools: HashMap<SocketAddr, Arc<InstancePool>> = HashMap::new();
        while let Some(update) = rx.recv().await {
            let endpoint = match update {
                RouteUpdate::Endpoint(config) => {
                    let name = config.name.clone();
                    let deployments: Vec<String> =
                        config.deployments.iter().map(|(d, _)| d.clone()).collect();
                    self.meters.retain(&name, Some(&deployments));
                    configs.insert(name.clone(), config);
                    name
                }
                RouteUpdate::EndpointRemoved(name) => {
                    configs.remove(&name);
                    ready.retain(|k, _| k.endpoint != name);
                    self.meters.retain(&name, None);
                    name
                }
                RouteUpdate::Backends { key, ready: addrs } => {
                    let name = key.endpoint.clone();
                    if addrs.is_empty() {
                        ready.remove(&key);
                    } else {
                        ready.insert(key, addrs);
                    }
                    name
                }
                RouteUpdate::Applied(done) => {
                    let _ = done.send(());
                    continue;
                }
            };
            let mut endpoints = self.table.load().endpoints.clone();
            match configs.get(&endpoint) {
                Some(config) => {
                    let route = Route::build(config, &self.meters, |deployment| {
                        let key = DeploymentKey {
                            endpoint: endpoint.clone(),
                            deployment: deployment.to_owned(),
                        };
                        let addrs = ready.get(&key).map(Vec::as_slice).unwrap_or_default();
                        addrs
                            .iter()
                            .map(|&addr| {
                                let pool = pools
                                    .entry(addr)
                                    .or_insert_with(|| InstancePool::new(addr, self.pools));
                                Instance::new(addr, Arc::clone(pool))
                            })
                            .collect()
                    });
                    endpoints.insert(endpoint, Arc::new(route));
                }
                None => {
                    endpoints.remove(&endpoint);
                }
            }
            self.table.store(Arc::new(Table::new(endpoints)));
            pools.retain(|addr, _| ready.values().any(|a| a.contains(addr)));
        }
    }

    /// The gateway listener's router and its HTTP/1.1 fast path.
    pub fn app(self: &Arc<Self>) -> kep_core::listener::App {
        kep_core::listener::App {
            router: axum::Router::new()
                .fallback(call)
                .with_state(Arc::clone(self)),
            front: self
                .fast_path
                .then(|| Arc::new(h1::GatewayFront(Arc::clone(self))) as Arc<dyn Front>),
            workers: self.pools.workers,
            unrouted: kep_core::listener::operator_shape,
            // A batch of images over gRPC is megabytes: in 16 KiB frames the gateway spent
            // half again the CPU time on a 19 MB call.
            http2_max_frame_bytes: Some(http2::MAX_FRAME_BYTES),
        }
    }

    pub fn meters(&self) -> Arc<Meters> {
        Arc::clone(&self.meters)
    }

    /// One endpoint call, counted on the meter of the deployment that answered it, or of
    /// the endpoint when the gateway answered it itself.
    async fn forward(&self, req: Request) -> Response {
        let start = Instant::now();
        let (parts, body) = req.into_parts();
        // The path is borrowed from a clone of the URI (a refcount), as `parts` moves on.
        let uri = parts.uri.clone();
        let content_type = parts
            .headers
            .get(header::CONTENT_TYPE)
            .map(HeaderValue::as_bytes);
        let authorization = parts
            .headers
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes);
        let table = self.table.load();
        // A gRPC client cannot put the endpoint in its path: its key names it.
        let (endpoint, rest) = match split_path(uri.path()) {
            Some(split) => split,
            None if Shape::of(content_type, uri.path()) == Shape::Grpc => {
                match table.by_key(authorization) {
                    Some(route) => (&*route.name, uri.path()),
                    None => return GatewayError::Unauthorized.answer(Shape::Grpc),
                }
            }
            None => {
                return GatewayError::NotFound("calls go to /endpoints/{endpoint}/{path}".into())
                    .into_response();
            }
        };
        let shape = Shape::of(content_type, rest);
        let route = table.endpoints.get(endpoint);
        let caller = route.filter(|route| authorized(authorization, &route.key_hash));
        // The limits come before the body is read: the endpoint's for a call with its key,
        // the peer's for any other.
        let key = match caller {
            Some(route) => Key::Client(Arc::clone(&route.name)),
            None => Key::peer(Peer::of(&parts.extensions)),
        };
        let admitted = self.limiter.admit(key);
        // An unknown name answers as a wrong key does: names are not disclosed.
        let Some(route) = route else {
            let e = admitted
                .err()
                .map_or(GatewayError::Unauthorized, GatewayError::from);
            return e.answer(shape);
        };
        let admission = match admitted {
            Ok(admission) => admission,
            Err(refusal) => {
                return self.metered(&route.meter, start, Err(refusal.into()), shape);
            }
        };
        if caller.is_none() {
            return self.metered(&route.meter, start, Err(GatewayError::Unauthorized), shape);
        }
        let Some(choice) = route.choose() else {
            let e = GatewayError::NoReadyInstance(endpoint.to_owned());
            return self.metered(&route.meter, start, Err(e), shape);
        };
        let _in_flight = self.metered.then(|| choice.primary.meter.enter());
        let answer = if broadcast::is_broadcast(parts.method.as_str(), rest) {
            self.broadcast(route, parts, body, rest).await
        } else if route.http2 && is_client_streaming(rest) {
            self.stream(route, &choice, parts, body, rest).await
        } else {
            self.proxy(route, &choice, parts, body, (endpoint, rest))
                .await
        };
        // A streamed answer is still in flight for the endpoint's limit.
        admission.until_sent(self.metered(&choice.primary.meter, start, answer, shape))
    }

    /// Counts the call on `meter` by its HTTP status (an error's, whatever its `shape`).
    fn metered(
        &self,
        meter: &Meter,
        start: Instant,
        answer: Result<Response, GatewayError>,
        shape: Shape,
    ) -> Response {
        let (status, res) = match answer {
            Ok(res) => (res.status(), res),
            Err(e) => (e.status(), e.answer(shape)),
        };
        if self.metered {
            meter.record(status, start.elapsed());
        }
        res
    }

    /// Sends the call to the chosen deployment, and a copy to each mirror.
    async fn proxy(
        &self,
        route: &Route,
        choice: &Choice<'_>,
        parts: axum::http::request::Parts,
        body: Body,
        (endpoint, rest): (&str, &str),
    ) -> Result<Response, GatewayError> {
        let Upstreamed {
            method,
            held,
            path_and_query,
            mut headers,
        } = self.upstreamed(parts, body, rest).await?;
        let upstream = |instance: &Instance| self.upstream(route, instance);

        for mirror in &choice.mirrors {
            let Some(instance) = mirror.instance() else {
                continue;
            };
            let req = upstream_request(
                &method,
                instance,
                &path_and_query,
                headers.clone(),
                held.body()?,
            );
            let (upstream, timeout, name) =
                (upstream(instance), self.timeout, Arc::clone(&mirror.name));
            let meter = self.metered.then(|| Arc::clone(&mirror.meter));
            // A mirror's answer is read and dropped; its failure never reaches the caller.
            self.mirrors.spawn(async move {
                let answered = match tokio::time::timeout(timeout, upstream.send(req)).await {
                    Ok(Ok(res)) => {
                        let _ = http_body_util::BodyExt::collect(res.into_body()).await;
                        true
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(deployment = %name, error = %e.cause, "mirror call failed");
                        false
                    }
                    Err(_) => {
                        tracing::debug!(deployment = %name, "mirror call timed out");
                        false
                    }
                };
                if let Some(meter) = meter {
                    meter.mirrored(answered);
                }
            });
        }

        // A refused connection (an instance that just died) is tried on the next instance.
        let attempts = choice.primary.instance_count().min(3);
        let mut last_error = None;
        for attempt in 1..=attempts {
            let Some(instance) = choice.primary.instance() else {
                break;
            };
            // The headers are moved into the last attempt, copied only for one that may fail.
            let headers = if attempt == attempts {
                std::mem::take(&mut headers)
            } else {
                headers.clone()
            };
            let req = upstream_request(&method, instance, &path_and_query, headers, held.body()?);
            match tokio::time::timeout(self.timeout, upstream(instance).send(req)).await {
                Err(_) => return Err(GatewayError::GatewayTimeout(self.timeout.as_secs())),
                Ok(Ok(res)) => return Ok(res),
                Ok(Err(e)) if e.connect => last_error = Some(e),
                Ok(Err(e)) => return Err(bad_gateway(&choice.primary.name, &e)),
            }
        }
        Err(match last_error {
            Some(e) => bad_gateway(&choice.primary.name, &e),
            None => GatewayError::NoReadyInstance(endpoint.to_owned()),
        })
    }
}

/// gRPC methods whose request is a stream of messages, which the caller may keep open for
/// as long as it likes: KServe's `ModelStreamInfer`. (TF Serving's are all unary.)
fn is_client_streaming(path: &str) -> bool {
    path == "/inference.GRPCInferenceService/ModelStreamInfer"
}

impl Gateway {
    /// A client-streaming call, passed on as it comes, to one instance, once: a body that
    /// never ends cannot be held, so it is not mirrored, not retried on another instance,
    /// and not under `max_body_bytes` (each message is under the instance's own limit).
    async fn stream(
        &self,
        route: &Route,
        choice: &Choice<'_>,
        parts: axum::http::request::Parts,
        body: Body,
        rest: &str,
    ) -> Result<Response, GatewayError> {
        let instance = choice
            .primary
            .instance()
            .ok_or_else(|| GatewayError::NoReadyInstance(route.name.to_string()))?;
        let path_and_query = path_and_query(&parts.uri, rest)?;
        let headers = upstream_headers(parts.headers, None, Peer::of(&parts.extensions));
        let body = http_body_util::BodyExt::boxed_unsync(http_body_util::BodyExt::map_err(
            body,
            std::io::Error::other,
        ));
        let req = upstream_request(&parts.method, instance, &path_and_query, headers, body);
        match tokio::time::timeout(self.timeout, self.upstream(route, instance).send(req)).await {
            Err(_) => Err(GatewayError::GatewayTimeout(self.timeout.as_secs())),
            Ok(Ok(res)) => Ok(res),
            Ok(Err(e)) => Err(bad_gateway(&choice.primary.name, &e)),
        }
    }
}

/// A call made ready for instances: its body held (to be sent more than once), its path on
/// the instance, its headers without the hop-by-hop ones.
struct Upstreamed {
    method: axum::http::Method,
    held: Held,
    path_and_query: PathAndQuery,
    headers: HeaderMap,
}

impl Gateway {
    async fn upstreamed(
        &self,
        parts: axum::http::request::Parts,
        body: Body,
        rest: &str,
    ) -> Result<Upstreamed, GatewayError> {
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let held = Held::read(body, declared, &self.limits, &self.spool).await?;
        let path_and_query = path_and_query(&parts.uri, rest)?;
        // A length for any body, and for an empty one the caller gave a length to.
        let length = (held.len() > 0 || declared.is_some()).then(|| held.len());
        let headers = upstream_headers(parts.headers, length, Peer::of(&parts.extensions));
        Ok(Upstreamed {
            method: parts.method,
            held,
            path_and_query,
            headers,
        })
    }

    fn upstream(&self, route: &Route, instance: &Instance) -> Upstream {
        Upstream {
            pool: Arc::clone(&instance.pool),
            http2: route.http2,
        }
    }
}

/// The path on the instance: `rest` and the call's query.
fn path_and_query(uri: &Uri, rest: &str) -> Result<PathAndQuery, GatewayError> {
    match uri.query() {
        Some(q) => PathAndQuery::try_from(format!("{rest}?{q}")),
        None => PathAndQuery::try_from(rest),
    }
    .map_err(|e| GatewayError::BadRequest(format!("path: {e}")))
}

/// The gateway listener's worker threads: as many as the runtime has (one per core unless
/// `TOKIO_WORKER_THREADS` says otherwise).
fn workers() -> usize {
    tokio::runtime::Handle::current().metrics().num_workers()
}

async fn call(State(gateway): State<Arc<Gateway>>, req: Request) -> Response {
    gateway.forward(req).await
}

/// `/endpoints/{endpoint}/{rest}` → (endpoint, `/{rest}`); the rest is `/` when absent.
fn split_path(path: &str) -> Option<(&str, &str)> {
    let after = path.strip_prefix("/endpoints/")?;
    let (endpoint, rest) = match after.find('/') {
        Some(i) => (&after[..i], &after[i..]),
        None => (after, "/"),
    };
    (!endpoint.is_empty()).then_some((endpoint, rest))
}

/// Whether an `Authorization` value is `Bearer` and the endpoint's key; both paths of the
/// gateway ask it.
fn authorized(authorization: Option<&[u8]>, key_hash: &[u8; 32]) -> bool {
    authorization
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| kep_core::http::credentials(v, "Bearer"))
        // Digests are compared: timing can tell nothing about the key itself.
        .is_some_and(|key| kep_core::secret::sha256(key) == *key_hash)
}

const X_FORWARDED_FOR: header::HeaderName = header::HeaderName::from_static("x-forwarded-for");

/// Headers that belong to one connection, not to the request (RFC 9110 §7.6.1).
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

fn is_hop_by_hop(name: &[u8]) -> bool {
    HOP_BY_HOP
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h.as_bytes()))
}

/// A header name with an underscore does not reach an instance, as nginx drops it
/// (`underscores_in_headers off`): a backend that reads `_` as `-` (CGI's naming, WSGI's)
/// would take `Content_Length` or `Transfer_Encoding` for the framing headers.
fn underscored(name: &[u8]) -> bool {
    name.contains(&b'_')
}

/// Whether a header says where a call came from or how it reached kep (`Forwarded`,
/// `X-Forwarded-*`, `X-Real-IP`): an instance that trusts them would take a caller's word
/// for it, so none passes as sent; the gateway writes `X-Forwarded-For` itself.
fn is_forwarding(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"forwarded")
        || name.eq_ignore_ascii_case(b"x-real-ip")
        || name
            .get(..12)
            .is_some_and(|p| p.eq_ignore_ascii_case(b"x-forwarded-"))
}

/// The caller's headers, less the hop-by-hop ones, the forwarding ones, `Host` and the API
/// key (which is the platform's, not the instance's); `X-Forwarded-For` the caller's
/// address, `peer`; `length`, the body's as held, if any.
fn upstream_headers(mut headers: HeaderMap, length: Option<u64>, peer: IpAddr) -> HeaderMap {
    headers.remove(header::CONTENT_LENGTH);
    // `TE: trailers` is end to end (gRPC needs it); headers `Connection` names are not.
    let te_trailers = headers.get(header::TE).is_some_and(|v| v == "trailers");
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .collect();
    for name in named {
        headers.remove(name.as_str());
    }
    for name in HOP_BY_HOP {
        headers.remove(*name);
    }
    let dropped: Vec<_> = headers
        .keys()
        .filter(|n| underscored(n.as_str().as_bytes()) || is_forwarding(n.as_str().as_bytes()))
        .cloned()
        .collect();
    for name in dropped {
        headers.remove(name);
    }
    let peer = HeaderValue::try_from(peer.to_string()).expect("an address is a header value");
    headers.insert(X_FORWARDED_FOR, peer);
    if te_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
    headers.remove(header::HOST);
    headers.remove(header::AUTHORIZATION);
    if let Some(length) = length {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
    headers
}

/// A request in origin form (`/path?query`) with the instance's `Host`, as HTTP/1.1 sends it.
fn upstream_request(
    method: &axum::http::Method,
    instance: &Instance,
    path_and_query: &PathAndQuery,
    mut headers: HeaderMap,
    body: ProxyBody,
) -> hyper::Request<ProxyBody> {
    headers.insert(header::HOST, instance.host.clone());
    let mut req = hyper::Request::new(body);
    *req.method_mut() = method.clone();
    *req.uri_mut() = Uri::from(path_and_query.clone());
    *req.headers_mut() = headers;
    req
}

/// Where a call goes: an instance's HTTP/1.1 connections, or its HTTP/2 one (gRPC).
struct Upstream {
    pool: Arc<InstancePool>,
    http2: bool,
}

impl Upstream {
    async fn send(self, req: hyper::Request<ProxyBody>) -> Result<Response, SendError> {
        if self.http2 {
            self.pool.send_http2(req).await.map(downstream_response)
        } else {
            self.pool.send(req).await.map(downstream_response)
        }
    }
}

fn downstream_response<B>(res: hyper::Response<B>) -> Response
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    let (mut parts, body) = res.into_parts();
    // Framed by its transfer coding, not by a length beside it (RFC 9112 §6.3): the caller
    // gets the body framed once.
    if parts.headers.contains_key(header::TRANSFER_ENCODING) {
        parts.headers.remove(header::CONTENT_LENGTH);
    }
    for name in HOP_BY_HOP {
        parts.headers.remove(*name);
    }
    Response::from_parts(parts, Body::new(body))
}

fn bad_gateway(deployment: &str, e: &SendError) -> GatewayError {
    GatewayError::BadGateway(format!(
        "deployment {deployment}: the instance failed: {}",
        e.cause
    ))
}

#[cfg(test)]
mod tests;
