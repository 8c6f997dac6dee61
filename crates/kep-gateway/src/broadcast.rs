//! Calls every ready instance of an endpoint must get, rather than the one the weighted
//! choice picks, because each changes what its server keeps: the registrations of Triton's
//! system shared memory extension, and changes of its logging and trace settings, REST and
//! gRPC. A region is registered with a server process; with the calls that name it spread
//! over several instances (and deployments), each of them must know it. A setting changed
//! on one instance would be read back from another as it was.

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;

use crate::forwarding::{Upstreamed, bad_gateway, upstream_request};
use crate::route::Route;
use crate::{Gateway, GatewayError};

/// Whether `method` `path` (on the instance) registers or unregisters shared memory or
/// changes the settings (gRPC's settings calls, which read them too when they name none,
/// all); the method as text, which both hyper's requests and the HTTP/1.1 fast path's heads
/// have.
pub fn is_broadcast(method: &str, path: &str) -> bool {
    if method != "POST" {
        return false;
    }
    if let Some(rpc) = path.strip_prefix("/inference.GRPCInferenceService/") {
        return matches!(
            rpc,
            "SystemSharedMemoryRegister"
                | "SystemSharedMemoryUnregister"
                | "LogSettings"
                | "TraceSetting"
        );
    }
    if matches!(path, "/v2/logging" | "/v2/trace/setting") {
        return true;
    }
    if let Some(model) = path
        .strip_prefix("/v2/models/")
        .and_then(|p| p.strip_suffix("/trace/setting"))
    {
        return !model.is_empty() && !model.contains('/');
    }
    let Some(rest) = path.strip_prefix("/v2/systemsharedmemory/") else {
        return false;
    };
    let action = rest.rsplit('/').next().unwrap_or_default();
    matches!(action, "register" | "unregister")
        && (rest == action
            || rest
                .strip_prefix("region/")
                .is_some_and(|r| r.contains('/')))
}

/// How an instance answered a broadcast call.
#[derive(PartialEq, Eq, Debug)]
enum Answered {
    Done,
    /// A 404 (gRPC's NOT_FOUND): the instance serves another model than the one the call
    /// names, or another protocol, as one of an endpoint's deployments may.
    NotServed,
    /// Any other HTTP error status, or gRPC error, which an answer without a message
    /// carries in its headers.
    Refused,
}

fn answered(res: &Response) -> Answered {
    let grpc = res.headers().get("grpc-status");
    if res.status() == StatusCode::NOT_FOUND || grpc.is_some_and(|status| status == "5") {
        Answered::NotServed
    } else if !res.status().is_success() || grpc.is_some_and(|status| status != "0") {
        Answered::Refused
    } else {
        Answered::Done
    }
}

/// The answer of a broadcast: the first refusal, else the first instance's that did what
/// was asked, else the first 404 (no instance serves what the call names).
fn merged(answers: Vec<Result<Response, GatewayError>>) -> Option<Result<Response, GatewayError>> {
    let (mut done, mut not_served) = (None, None);
    for answer in answers {
        match answer {
            Ok(res) => match answered(&res) {
                Answered::Done => {
                    done.get_or_insert(res);
                }
                Answered::NotServed => {
                    not_served.get_or_insert(res);
                }
                Answered::Refused => return Some(Ok(res)),
            },
            Err(e) => return Some(Err(e)),
        }
    }
    done.or(not_served).map(Ok)
}

impl Gateway {
    /// Sends the call to every ready instance of every deployment of the endpoint, at once;
    /// answers as [`merged`] says.
    pub(crate) async fn broadcast(
        &self,
        route: &Route,
        parts: axum::http::request::Parts,
        body: Body,
        rest: &str,
    ) -> Result<Response, GatewayError> {
        let Upstreamed {
            method,
            held,
            path_and_query,
            headers,
        } = self.upstreamed(parts, body, rest).await?;
        let mut calls = Vec::new();
        for backend in &route.backends {
            for instance in backend.instances() {
                let req = upstream_request(
                    &method,
                    instance,
                    &path_and_query,
                    headers.clone(),
                    held.body()?,
                );
                let upstream = self.upstream(route, instance);
                let name = &backend.name;
                calls.push(async move {
                    match tokio::time::timeout(self.timeout, upstream.send(req)).await {
                        Err(_) => Err(GatewayError::GatewayTimeout(self.timeout.as_secs())),
                        Ok(Err(e)) => Err(bad_gateway(name, &e)),
                        Ok(Ok(res)) => Ok(res),
                    }
                });
            }
        }
        let answers = futures_util::future::join_all(calls).await;
        merged(answers)
            .unwrap_or_else(|| Err(GatewayError::NoReadyInstance(route.name.to_string())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(status: u16, grpc: Option<&str>) -> Result<Response, GatewayError> {
        let mut res = Response::builder().status(status);
        if let Some(code) = grpc {
            res = res.header("grpc-status", code);
        }
        Ok(res.body(Body::from(format!("{status} {grpc:?}"))).unwrap())
    }

    async fn text(answer: Option<Result<Response, GatewayError>>) -> String {
        let body = answer.unwrap().unwrap().into_body();
        let bytes = axum::body::to_bytes(body, 100).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_refusal_wins_then_what_was_done_then_a_model_not_served() {
        let t = |answers| async { text(merged(answers)).await };
        // A deployment of another model answers 404: what the others did stands.
        assert_eq!(t(vec![res(404, None), res(200, None)]).await, "200 None");
        assert_eq!(
            t(vec![res(200, Some("5")), res(200, Some("0"))]).await,
            r#"200 Some("0")"#
        );
        assert_eq!(t(vec![res(404, None), res(404, None)]).await, "404 None");
        assert_eq!(t(vec![res(200, None), res(400, None)]).await, "400 None");
        assert_eq!(
            t(vec![res(200, None), res(200, Some("3"))]).await,
            r#"200 Some("3")"#
        );
        assert_eq!(t(vec![res(404, None), res(501, None)]).await, "501 None");
        assert!(merged(Vec::new()).is_none());
    }

    #[test]
    fn only_shared_memory_registrations_and_settings_changes_are_broadcast() {
        for path in [
            "/v2/logging",
            "/v2/trace/setting",
            "/v2/models/m/trace/setting",
            "/inference.GRPCInferenceService/LogSettings",
            "/inference.GRPCInferenceService/TraceSetting",
            "/v2/systemsharedmemory/register",
            "/v2/systemsharedmemory/unregister",
            "/v2/systemsharedmemory/region/in/register",
            "/v2/systemsharedmemory/region/in/unregister",
            "/inference.GRPCInferenceService/SystemSharedMemoryRegister",
            "/inference.GRPCInferenceService/SystemSharedMemoryUnregister",
        ] {
            assert!(is_broadcast("POST", path), "{path}");
            assert!(!is_broadcast("GET", path), "{path}");
        }
        for path in [
            "/v2/systemsharedmemory/status",
            "/v2/systemsharedmemory/region/in/status",
            "/v2/systemsharedmemory/region/register",
            "/v2/systemsharedmemory/x/register",
            "/v2/models/m/infer",
            "/v2/models//trace/setting",
            "/v2/models/m/versions/1/trace/setting",
            "/v2/logging/x",
            "/inference.GRPCInferenceService/SystemSharedMemoryStatus",
            "/inference.GRPCInferenceService/ModelInfer",
        ] {
            assert!(!is_broadcast("POST", path), "{path}");
        }
    }
}
