use axum::body::Body;
use axum::extract::Request;
use axum::http::HeaderValue;
use axum::response::Response;

use super::*;
use crate::forwarding::split_path;

/// A `protocol: grpc` endpoint reaches its instances over HTTP/2, trailers included.
#[tokio::test]
async fn grpc_endpoints_are_proxied_over_http2() {
    use axum::http::{HeaderMap, Version};
    let upstream = axum::Router::new().fallback(|req: Request| async move {
        assert_eq!(req.headers()["te"], "trailers", "gRPC servers need it");
        let version = format!("{:?} {}", req.version(), req.uri().path());
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        let frames = futures_util::stream::iter([
            Ok::<_, std::io::Error>(http_body::Frame::data(bytes::Bytes::from(version))),
            Ok(http_body::Frame::trailers(trailers)),
        ]);
        Response::new(Body::new(http_body_util::StreamBody::new(frames)))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, upstream).await });

    let dir = tempfile::tempdir().unwrap();
    let gateway = grpc_gateway(vec![addr], GatewaySettings::default(), dir.path()).await;
    let req = Request::builder()
        .method("POST")
        .uri("/endpoints/g/pkg.Service/Method")
        .header("authorization", "Bearer k")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Body::from("frame"))
        .unwrap();
    let res = gateway.forward(req).await;
    assert_eq!(res.status(), 200);
    let collected = http_body_util::BodyExt::collect(res.into_body())
        .await
        .unwrap();
    assert_eq!(collected.trailers().unwrap()["grpc-status"], "0");
    assert_eq!(
        collected.to_bytes(),
        format!("{:?} /pkg.Service/Method", Version::HTTP_2)
    );

    // A gRPC client's path has no endpoint in it: the key names the endpoint.
    let call = |key: &str| {
        Request::builder()
            .method("POST")
            .uri("/pkg.Service/Method")
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Body::from("frame"))
            .unwrap()
    };
    let res = gateway.forward(call("k")).await;
    let collected = http_body_util::BodyExt::collect(res.into_body())
        .await
        .unwrap();
    assert_eq!(
        collected.to_bytes(),
        format!("{:?} /pkg.Service/Method", Version::HTTP_2)
    );
    let res = gateway.forward(call("wrong")).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["grpc-status"], "16");
}

/// A gateway with one `protocol: grpc` endpoint, `g` (key `k`), of the instances at `ready`.
async fn grpc_gateway(
    ready: Vec<SocketAddr>,
    settings: GatewaySettings,
    dir: &std::path::Path,
) -> Arc<Gateway> {
    one_endpoint(&settings, dir, ("g", true), ready).await
}

/// A gateway with endpoint `name` (key `k`, gRPC when `http2`) of one deployment on the
/// instances at `ready`, once its routes are in effect; spooling into `dir`.
pub(crate) async fn one_endpoint(
    settings: &GatewaySettings,
    dir: &std::path::Path,
    (name, http2): (&str, bool),
    ready: Vec<SocketAddr>,
) -> Arc<Gateway> {
    let ctx = kep_core::service::Context::standalone(dir);
    let (gateway, routes) = Gateway::start(settings, dir.into(), &ctx);
    routes
        .send(RouteUpdate::Endpoint(EndpointRoute {
            name: name.into(),
            key_hash: kep_core::secret::sha256("k"),
            http2,
            deployments: vec![("d".into(), 100)],
            responder: None,
        }))
        .unwrap();
    let key = DeploymentKey {
        endpoint: name.into(),
        deployment: "d".into(),
    };
    routes.send(RouteUpdate::Backends { key, ready }).unwrap();
    let (applied, done) = tokio::sync::oneshot::channel();
    routes.send(RouteUpdate::Applied(applied)).unwrap();
    done.await.unwrap();
    gateway
}

/// An HTTP/2 instance answering each call with its body's length and byte sum, until
/// `stop` fires (then it says GOAWAY and closes).
async fn counting_instance(
    listener: tokio::net::TcpListener,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    let app = axum::Router::new()
        .fallback(|body: bytes::Bytes| async move {
            let sum: u64 = body.iter().map(|&b| u64::from(b)).sum();
            format!("{} {sum}", body.len())
        })
        .layer(axum::extract::DefaultBodyLimit::disable());
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.await;
        })
        .await
        .unwrap();
}

async fn grpc_call(gateway: &Gateway, body: Vec<u8>) -> (u16, String) {
    let req = Request::builder()
        .method("POST")
        .uri("/pkg.Service/Method")
        .header("authorization", "Bearer k")
        .header("content-type", "application/grpc")
        .body(Body::from(body))
        .unwrap();
    let res = gateway.forward(req).await;
    let status = res.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(res.into_body())
        .await
        .unwrap()
        .to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// Bodies past the instance's 16 MiB window, and bodies spooled to disk (sent a chunk at a
/// time as the window allows), arrive whole.
#[tokio::test]
async fn large_and_spooled_bodies_reach_a_grpc_instance_whole() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_stop, stop) = tokio::sync::oneshot::channel();
    tokio::spawn(counting_instance(listener, stop));
    let dir = tempfile::tempdir().unwrap();
    let settings = GatewaySettings {
        max_body_bytes: 40 << 20,
        body_buffer_bytes: 20 << 20,
        ..GatewaySettings::default()
    };
    let gateway = grpc_gateway(vec![addr], settings, dir.path()).await;
    let body = |len: usize| -> Vec<u8> { (0..len).map(|i| (i % 251) as u8).collect() };
    let sum = |b: &[u8]| -> u64 { b.iter().map(|&x| u64::from(x)).sum() };
    // In memory, past the window; then spooled (past the 20 MiB buffer), with the window
    // opening several times.
    for len in [(18 << 20) + 7, (36 << 20) + 3] {
        let b = body(len);
        let expected = format!("{len} {}", sum(&b));
        assert_eq!(grpc_call(&gateway, b).await, (200, expected));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// An instance that goes away (GOAWAY, then closed) and comes back on the same address:
/// the next call is made on a new connection.
#[tokio::test]
async fn a_grpc_instance_that_restarts_is_reconnected() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_first, stop) = tokio::sync::oneshot::channel();
    let first = tokio::spawn(counting_instance(listener, stop));
    let dir = tempfile::tempdir().unwrap();
    let gateway = grpc_gateway(vec![addr], GatewaySettings::default(), dir.path()).await;
    assert_eq!(grpc_call(&gateway, vec![1, 2]).await, (200, "2 3".into()));

    stop_first.send(()).unwrap();
    first.await.unwrap();
    let (status, text) = grpc_call(&gateway, vec![1]).await;
    assert_eq!(status, 200, "a gRPC status, not HTTP's");
    assert!(text.is_empty(), "no answer from a stopped instance: {text}");

    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let (_stop, stop) = tokio::sync::oneshot::channel();
    tokio::spawn(counting_instance(listener, stop));
    assert_eq!(
        grpc_call(&gateway, vec![5, 5, 5]).await,
        (200, "3 15".into())
    );
}

/// A stream the instance refuses unprocessed (`REFUSED_STREAM`) is sent to the next one.
#[tokio::test]
async fn a_refused_stream_goes_to_the_next_instance() {
    let refusing = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let refusing_addr = refusing.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = refusing.accept().await {
            tokio::spawn(async move {
                let mut conn = h2::server::handshake(socket).await.unwrap();
                while let Some(Ok((_, mut respond))) = conn.accept().await {
                    respond.send_reset(h2::Reason::REFUSED_STREAM);
                }
            });
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_stop, stop) = tokio::sync::oneshot::channel();
    tokio::spawn(counting_instance(listener, stop));
    let dir = tempfile::tempdir().unwrap();
    let gateway = grpc_gateway(
        vec![refusing_addr, addr],
        GatewaySettings::default(),
        dir.path(),
    )
    .await;
    // Round robin starts each call on a different instance: both orders are seen.
    for _ in 0..4 {
        assert_eq!(grpc_call(&gateway, vec![2, 2]).await, (200, "2 4".into()));
    }
}

#[test]
fn paths_split_into_endpoint_and_rest() {
    assert_eq!(
        split_path("/endpoints/e1/v1/models"),
        Some(("e1", "/v1/models"))
    );
    assert_eq!(split_path("/endpoints/e1"), Some(("e1", "/")));
    assert_eq!(split_path("/endpoints/e1/"), Some(("e1", "/")));
    assert_eq!(split_path("/endpoints/"), None);
    assert_eq!(split_path("/other/e1"), None);
}
