use super::*;

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
    let ctx = kep_core::service::Context::standalone(dir.path());
    let (gateway, routes) = Gateway::start(&GatewaySettings::default(), dir.path().into(), &ctx);
    let key = DeploymentKey {
        endpoint: "g".into(),
        deployment: "d".into(),
    };
    routes
        .send(RouteUpdate::Endpoint(EndpointRoute {
            name: "g".into(),
            key_hash: kep_core::secret::sha256("k"),
            http2: true,
            deployments: vec![("d".into(), 100)],
            responder: None,
        }))
        .unwrap();
    routes
        .send(RouteUpdate::Backends {
            key,
            ready: vec![addr],
        })
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
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
