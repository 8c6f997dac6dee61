//! One endpoint call, from its path and key to an instance's answer: the endpoint and its
//! limits, the choice of deployment, mirroring, retrying a refused connection on another
//! instance, and a client-streaming gRPC call passed on as it comes.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::uri::PathAndQuery;
use axum::http::{HeaderMap, HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use kep_core::limits::{Key, Peer};

use crate::body::{Held, ProxyBody};
use crate::error::SendError;
use crate::headers::{HOP_BY_HOP, authorized, upstream_headers};
use crate::meter::Meter;
use crate::pool::InstancePool;
use crate::route::{Choice, Instance, Route};
use crate::{Gateway, GatewayError, Shape, broadcast};

impl Gateway {
    /// One endpoint call, counted on the meter of the deployment that answered it, or of
    /// the endpoint when the gateway answered it itself.
    pub(crate) async fn forward(&self, req: Request) -> Response {
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
    pub(crate) fn metered(
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
pub(crate) struct Upstreamed {
    pub(crate) method: axum::http::Method,
    pub(crate) held: Held,
    pub(crate) path_and_query: PathAndQuery,
    pub(crate) headers: HeaderMap,
}

impl Gateway {
    pub(crate) async fn upstreamed(
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

    pub(crate) fn upstream(&self, route: &Route, instance: &Instance) -> Upstream {
        Upstream {
            pool: Arc::clone(&instance.pool),
            http2: route.http2,
        }
    }
}

/// The path on the instance: `rest` and the call's query.
pub(crate) fn path_and_query(uri: &Uri, rest: &str) -> Result<PathAndQuery, GatewayError> {
    match uri.query() {
        Some(q) => PathAndQuery::try_from(format!("{rest}?{q}")),
        None => PathAndQuery::try_from(rest),
    }
    .map_err(|e| GatewayError::BadRequest(format!("path: {e}")))
}

pub(crate) async fn call(State(gateway): State<Arc<Gateway>>, req: Request) -> Response {
    gateway.forward(req).await
}

/// `/endpoints/{endpoint}/{rest}` → (endpoint, `/{rest}`); the rest is `/` when absent.
pub(crate) fn split_path(path: &str) -> Option<(&str, &str)> {
    let after = path.strip_prefix("/endpoints/")?;
    let (endpoint, rest) = match after.find('/') {
        Some(i) => (&after[..i], &after[i..]),
        None => (after, "/"),
    };
    (!endpoint.is_empty()).then_some((endpoint, rest))
}

/// A request in origin form (`/path?query`) with the instance's `Host`, as HTTP/1.1 sends it.
pub(crate) fn upstream_request(
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
pub(crate) struct Upstream {
    pool: Arc<InstancePool>,
    http2: bool,
}

impl Upstream {
    pub(crate) async fn send(self, req: hyper::Request<ProxyBody>) -> Result<Response, SendError> {
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

pub(crate) fn bad_gateway(deployment: &str, e: &SendError) -> GatewayError {
    GatewayError::BadGateway(format!(
        "deployment {deployment}: the instance failed: {}",
        e.cause
    ))
}
