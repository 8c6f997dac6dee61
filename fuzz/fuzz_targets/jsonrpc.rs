//! `POST /api/rpc`: the input is the body, sent through the live service's real router, so
//! the envelope, the method's params and their checks are read as the server reads them.
//! The call carries an admin token, so the `Room.*` methods get past authorization.
#![no_main]

use std::sync::LazyLock;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use kep_api::live::{RpcError, provision_value};
use kep_core::service::Service as _;
use kep_fuzz::{call, context, runtime, setup_call};
use kep_live::{LiveService, LiveSettings};
use libfuzzer_sys::fuzz_target;
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;

/// The live router, and `Authorization: Bearer <token>` of a provisioned admin token.
static LIVE: LazyLock<(Router, String)> = LazyLock::new(|| {
    let live = runtime()
        .block_on(LiveService::start(
            LiveSettings::default(),
            &context("http://127.0.0.1:8801"),
        ))
        .expect("the live service starts");
    let (admin, router) = (live.admin_router(), live.app().router);
    let secrets = setup_call(
        &admin,
        Method::POST,
        "/admin/v1/live/services",
        &[],
        &json!({"serviceId": "fuzz"}),
        StatusCode::CREATED,
    );
    let secret = secrets["adminSecret"].as_str().expect("an admin secret");
    let rpc = |params| {
        setup_call(
            &router,
            Method::POST,
            "/api/rpc",
            &[],
            &json!({"jsonrpc": "2.0", "id": 1, "method": "Provision", "params": params}),
            StatusCode::OK,
        )
    };
    let step1 = rpc(json!({"serviceId": "fuzz", "scheme": "internal"}));
    let nonce = step1["error"]["data"]["nonce"].as_str().expect("a nonce");
    let value = provision_value("fuzz", secret, nonce);
    let step2 = rpc(json!({"serviceId": "fuzz", "scheme": "internal",
        "auth": {"nonce": nonce, "key": "fuzz", "value": value}}));
    let token = step2["result"]["token"].as_str().expect("a token");
    (router, format!("Bearer {token}"))
});

/// A JSON-RPC answer, its `id` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer<'a> {
    jsonrpc: &'a str,
    #[serde(borrow)]
    id: &'a RawValue,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<RpcError>,
}

fuzz_target!(|data: &[u8]| {
    let (router, bearer) = &*LIVE;
    let request = Request::builder()
        .method(Method::POST)
        .uri("/api/rpc")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, bearer)
        .body(Body::from(data.to_vec()))
        .expect("a well-formed request");
    let answer = call(router, request);
    // Every answer to a body within the size limit is a JSON-RPC answer in an HTTP 200.
    assert_eq!(answer.status, StatusCode::OK);
    // Not `Answer::json`: an echoed id such as `1e400` is JSON that serde_json's `Value`
    // refuses, and the id is echoed as written.
    let parsed: Answer = serde_json::from_slice(&answer.body).unwrap_or_else(|e| {
        panic!(
            "not a JSON-RPC answer ({e}): {}",
            String::from_utf8_lossy(&answer.body)
        )
    });
    assert_eq!(parsed.jsonrpc, "2.0");
    assert!(
        parsed.result.is_some() != parsed.error.is_some(),
        "one of result and error"
    );
    // The id is null or the request's own, echoed byte for byte.
    let id = parsed.id.get().as_bytes();
    assert!(
        id == b"null" || data.windows(id.len()).any(|w| w == id),
        "id {} is not the request's",
        parsed.id
    );
    if let Some(error) = parsed.error {
        // Nothing a client sends is an internal error (-32603).
        assert!(
            matches!(
                error.code,
                -32700 | -32600 | -32601 | -32602 | -11002 | -11004
            ),
            "{error:?}"
        );
    }
});
