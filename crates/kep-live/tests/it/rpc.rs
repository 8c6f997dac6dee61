//! Provision's two steps and the JSON-RPC envelope.

use std::time::Duration;

use axum::routing::post;
use kep_api::live::{CreateServiceRequest, Scheme, provision_value};
use kep_client::live::LiveClient;
use serde_json::{Value, json};

use crate::common::{rpc_code, rpc_data, spawn};

#[tokio::test]
async fn provision_issues_a_token_in_two_steps() {
    let srv = spawn(|_| {}).await;
    let secrets = srv.create_service("svc").await;
    let client = LiveClient::new(&srv.live_url);

    let (status, step1) = srv
        .raw_rpc("application/json", None, r#"{"jsonrpc":"2.0","id":"1","method":"Provision","params":{"version":"2.0","serviceId":"svc","scheme":"internal"}}"#)
        .await;
    assert_eq!(status, 200);
    assert_eq!(step1["id"], "1");
    assert_eq!(step1["error"]["code"], -11002);
    assert_eq!(step1["error"]["message"], "Unauthorized");
    let nonce = step1["error"]["data"]["nonce"].as_str().unwrap().to_owned();

    // value = sha256hex(sha256hex("svc:<adminSecret>") + ":" + nonce); the helper is checked
    // against sha256sum in its unit test.
    let value = provision_value("svc", &secrets.admin_secret, &nonce);
    let result = client
        .provision_with("svc", Scheme::Internal, &nonce, &value)
        .await
        .unwrap();
    assert_eq!(result.ttl, 3600);
    assert_eq!(result.api, srv.live_url);
    assert!(result.token.len() >= 22);
    assert_eq!(result.uuid.len(), 36);

    let rooms = LiveClient::new(&result.api)
        .with_token(&result.token)
        .list_rooms()
        .await
        .unwrap();
    assert!(rooms.is_empty());

    // The nonce was used up.
    let again = client
        .provision_with("svc", Scheme::Internal, &nonce, &value)
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&again), -11002);
}

#[tokio::test]
async fn every_failed_step_2_answers_a_fresh_nonce() {
    let srv = spawn(|_| {}).await;
    let secrets = srv.create_service("svc").await;
    srv.create_service("other").await;
    let client = LiveClient::new(&srv.live_url);

    let nonce = client
        .provision_nonce("svc", Scheme::Internal)
        .await
        .unwrap();
    let wrong = client
        .provision_with("svc", Scheme::Internal, &nonce, "0000")
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&wrong), -11002);
    let fresh = rpc_data(&wrong)["nonce"].as_str().unwrap().to_owned();
    assert_ne!(fresh, nonce);

    // The fresh nonce is good for a correct step 2.
    let value = provision_value("svc", &secrets.admin_secret, &fresh);
    client
        .provision_with("svc", Scheme::Internal, &fresh, &value)
        .await
        .unwrap();

    // Unknown nonce, unknown service, key that is not the serviceId, another service's nonce.
    let value = provision_value("svc", &secrets.admin_secret, "made-up");
    let e = client
        .provision_with("svc", Scheme::Internal, "made-up", &value)
        .await
        .unwrap_err();
    assert!(rpc_data(&e)["nonce"].is_string());
    let n = client
        .provision_nonce("nope", Scheme::Internal)
        .await
        .unwrap();
    let e = client
        .provision_with("nope", Scheme::Internal, &n, "x")
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002);
    assert!(rpc_data(&e)["nonce"].is_string());
    let n = client
        .provision_nonce("other", Scheme::Internal)
        .await
        .unwrap();
    let value = provision_value("svc", &secrets.admin_secret, &n);
    let e = client
        .provision_with("svc", Scheme::Internal, &n, &value)
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002, "a nonce issued for another service");

    let n = client
        .provision_nonce("svc", Scheme::Internal)
        .await
        .unwrap();
    let params = json!({"serviceId":"svc","scheme":"internal","auth":{"nonce":n,"key":"other","value":provision_value("svc", &secrets.admin_secret, &n)}});
    let e = client
        .call::<_, Value>(2, "Provision", params)
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002, "auth.key must be the serviceId");

    // The ordinary service secret is not the admin secret.
    let n = client
        .provision_nonce("svc", Scheme::Internal)
        .await
        .unwrap();
    let value = provision_value("svc", &secrets.service_secret, &n);
    let e = client
        .provision_with("svc", Scheme::Internal, &n, &value)
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002);

    // `external` without a verifier configured.
    let n = client
        .provision_nonce("svc", Scheme::External)
        .await
        .unwrap();
    let value = provision_value("svc", &secrets.admin_secret, &n);
    let e = client
        .provision_with("svc", Scheme::External, &n, &value)
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002);
}

#[tokio::test]
async fn step_2_must_come_within_the_transaction_window() {
    let srv = spawn(|s| s.provision_window_s = 1).await;
    let secrets = srv.create_service("svc").await;
    let client = LiveClient::new(&srv.live_url);
    let n = client
        .provision_nonce("svc", Scheme::Internal)
        .await
        .unwrap();
    // The window (1 s) has passed.
    srv.clock.advance(Duration::from_secs(1));
    let value = provision_value("svc", &secrets.admin_secret, &n);
    let e = client
        .provision_with("svc", Scheme::Internal, &n, &value)
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002);
    // Its fresh nonce opens a fresh window.
    let fresh = rpc_data(&e)["nonce"].as_str().unwrap().to_owned();
    let value = provision_value("svc", &secrets.admin_secret, &fresh);
    client
        .provision_with("svc", Scheme::Internal, &fresh, &value)
        .await
        .unwrap();
}

#[tokio::test]
async fn provision_params_are_checked_first() {
    let srv = spawn(|_| {}).await;
    let client = LiveClient::new(&srv.live_url);
    let cases = [
        (json!({"scheme": "internal"}), "serviceId"),
        (json!({"serviceId": "svc"}), "scheme"),
        (json!({"serviceId": "svc", "scheme": "bogus"}), "scheme"),
        (json!({"serviceId": 5, "scheme": "internal"}), "serviceId"),
        (
            json!({"serviceId": "svc", "scheme": "internal", "version": 2}),
            "version",
        ),
        (
            json!({"serviceId": "svc", "scheme": "internal", "auth": {"key": "svc", "value": "v"}}),
            "auth.nonce",
        ),
        (json!({"serviceId": "", "scheme": "internal"}), "serviceId"),
    ];
    for (params, field) in cases {
        let e = client
            .call::<_, Value>(1, "Provision", params.clone())
            .await
            .unwrap_err();
        assert_eq!(rpc_code(&e), -32602, "{params}");
        assert_eq!(rpc_data(&e)["field"], field, "{params}");
    }
}

#[tokio::test]
async fn external_scheme_asks_the_customers_verifier() {
    let srv = spawn(|_| {}).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let verifier = axum::Router::new().route(
        "/verify",
        post(move |axum::Json(body): axum::Json<Value>| {
            let tx = tx.clone();
            async move {
                let ok = body["value"] == "let-me-in";
                tx.send(body).unwrap();
                if ok {
                    axum::http::StatusCode::NO_CONTENT
                } else {
                    axum::http::StatusCode::FORBIDDEN
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/verify", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, verifier).await });
    srv.admin
        .create_live_service(&CreateServiceRequest {
            service_id: Some("ext".into()),
            external_verifier_url: Some(url),
            ..Default::default()
        })
        .await
        .unwrap();

    let client = LiveClient::new(&srv.live_url);
    let n = client
        .provision_nonce("ext", Scheme::External)
        .await
        .unwrap();
    let e = client
        .provision_with("ext", Scheme::External, &n, "wrong")
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002);
    assert_eq!(
        rx.recv().await.unwrap(),
        json!({"serviceId": "ext", "nonce": n, "value": "wrong"})
    );

    let n = rpc_data(&e)["nonce"].as_str().unwrap().to_owned();
    let ok = client
        .provision_with("ext", Scheme::External, &n, "let-me-in")
        .await
        .unwrap();
    assert!(!ok.token.is_empty());

    // Removing the verifier turns `external` off again.
    srv.admin.set_live_verifier("ext", None).await.unwrap();
    let n = client
        .provision_nonce("ext", Scheme::External)
        .await
        .unwrap();
    let e = client
        .provision_with("ext", Scheme::External, &n, "let-me-in")
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002);
}

#[tokio::test]
async fn an_external_verifier_that_redirects_is_not_followed() {
    let srv = spawn(|_| {}).await;
    let serve = async |app: axum::Router| {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/verify", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    };
    // A verifier that says yes to anything, and the configured URL, which redirects there.
    let (tx, mut asked) = tokio::sync::mpsc::unbounded_channel::<()>();
    let yes = serve(axum::Router::new().fallback(move || {
        let _ = tx.send(());
        async { axum::http::StatusCode::NO_CONTENT }
    }))
    .await;
    let redirecting = serve(axum::Router::new().fallback(move || {
        let yes = yes.clone();
        async move { axum::response::Redirect::temporary(&yes) }
    }))
    .await;
    srv.admin
        .create_live_service(&CreateServiceRequest {
            service_id: Some("moved".into()),
            external_verifier_url: Some(redirecting),
            ..Default::default()
        })
        .await
        .unwrap();
    let client = LiveClient::new(&srv.live_url);
    let n = client
        .provision_nonce("moved", Scheme::External)
        .await
        .unwrap();
    // The redirect is the verifier's one answer, and it is not a yes.
    let e = client
        .provision_with("moved", Scheme::External, &n, "anything")
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002);
    assert!(asked.try_recv().is_err());
}

#[tokio::test]
async fn envelope_errors_have_their_codes() {
    let srv = spawn(|s| s.body_limit_bytes = 256).await;
    let j = "application/json";
    let cases: [(&str, i64); 7] = [
        ("{not json", -32700),
        (
            r#"{"jsonrpc":"1.0","id":"1","method":"Room.ListRooms","params":{}}"#,
            -32600,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"Room.ListRooms","params":{}}"#,
            -32600,
        ),
        (r#"{"jsonrpc":"2.0","id":"1","params":{}}"#, -32600),
        (r#""just a string""#, -32600),
        (
            r#"{"jsonrpc":"2.0","id":"1","method":"Room.Nope","params":{}}"#,
            -32601,
        ),
        (
            r#"{"jsonrpc":"2.0","id":"1","method":"Room.ListParticipants","params":[]}"#,
            -32602,
        ),
    ];
    for (body, code) in cases {
        let (status, answer) = srv.raw_rpc(j, None, body).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(answer["jsonrpc"], "2.0");
        assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
    }
    // A member of the wrong type is -32600 naming it, and the request's id is kept; an
    // escaped string is still a string.
    for (body, id, field) in [
        (
            r#"{"jsonrpc":2,"id":"7","method":"Room.ListRooms","params":{}}"#,
            "7",
            "jsonrpc",
        ),
        (
            r#"{"jsonrpc":"2.0","id":"8","method":5,"params":{}}"#,
            "8",
            "method",
        ),
        (
            r#"{"jsonrpc":"2.0","id":"9","method":null,"params":{}}"#,
            "9",
            "method",
        ),
    ] {
        let (status, answer) = srv.raw_rpc(j, None, body).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(answer["id"], id, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], -32600, "{body}: {answer}");
        let reason = answer["error"]["data"]["reason"].as_str().unwrap();
        assert!(reason.contains(&format!("`{field}`")), "{body}: {answer}");
    }
    let (_, answer) = srv
        .raw_rpc(
            j,
            None,
            r#"{"jsonrpc":"2\u002e0","id":"1","method":"Room.Nope","params":{}}"#,
        )
        .await;
    assert_eq!(answer["error"]["code"], -32601, "{answer}");

    // `params` is required of every method, `{}` where it takes none (seed 000).
    for body in [
        r#"{"jsonrpc":"2.0","id":"1","method":"Room.ListRooms"}"#,
        r#"{"jsonrpc":"2.0","id":"1","method":"Room.ListParticipants","params":null}"#,
        r#"{"jsonrpc":"2.0","id":"1","method":"Provision"}"#,
    ] {
        let (status, answer) = srv.raw_rpc(j, None, body).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(answer["id"], "1", "{body}: {answer}");
        assert_eq!(answer["error"]["code"], -32602, "{body}: {answer}");
        assert_eq!(
            answer["error"]["data"]["field"], "params",
            "{body}: {answer}"
        );
    }
    // Another HTTP method: 405, with a JSON-RPC error as its body.
    for method in [
        reqwest::Method::GET,
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
    ] {
        let res = reqwest::Client::new()
            .request(method.clone(), format!("{}/api/rpc", srv.live_url))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 405, "{method}");
        assert_eq!(res.headers()["allow"], "POST");
        let answer: Value = res.json().await.unwrap();
        assert_eq!(answer["jsonrpc"], "2.0");
        assert_eq!(answer["id"], Value::Null);
        assert_eq!(answer["error"]["code"], -32600, "{method}: {answer}");
    }

    // The id is echoed whatever its form.
    let (_, answer) = srv
        .raw_rpc(j, None, r#"{"jsonrpc":"2.0","id":7,"method":"Room.Nope"}"#)
        .await;
    assert_eq!(answer["id"], 7);

    // Content-Type.
    let (status, answer) = srv
        .raw_rpc(
            "text/plain",
            None,
            r#"{"jsonrpc":"2.0","id":"1","method":"Room.ListRooms"}"#,
        )
        .await;
    assert_eq!(status, 415);
    assert_eq!(answer["error"]["code"], -32600);
    let (status, _) = srv
        .raw_rpc(
            "application/json; charset=utf-8",
            None,
            r#"{"jsonrpc":"2.0","id":"1","method":"Room.ListRooms"}"#,
        )
        .await;
    assert_eq!(status, 200);

    // The body limit: at it, and one over.
    let base = r#"{"jsonrpc":"2.0","id":"1","method":"Room.ListRooms","params":{"version":""}}"#;
    let pad = |n: usize| {
        base.replace(
            r#""version":"""#,
            &format!(r#""version":"{}""#, "x".repeat(n)),
        )
    };
    let at = pad(256 - base.len());
    assert_eq!(at.len(), 256);
    let (status, answer) = srv.raw_rpc(j, None, at).await;
    assert_eq!(
        (status, answer["error"]["code"].as_i64()),
        (200, Some(-11002))
    );
    let over = pad(257 - base.len());
    let (status, answer) = srv.raw_rpc(j, None, over).await;
    assert_eq!(status, 413);
    assert_eq!(answer["error"]["code"], -32600);
}

#[tokio::test]
async fn a_batch_answers_an_array_in_order() {
    let srv = spawn(|_| {}).await;
    let secrets = srv.create_service("svc").await;
    let token = LiveClient::new(&srv.live_url)
        .provision("svc", &secrets.admin_secret)
        .await
        .unwrap()
        .token;
    let j = "application/json";
    // Every answer of its own: a result, errors of every kind, a member that is no object.
    let batch = r#" [
        {"jsonrpc":"2.0","id":"a","method":"Room.ListRooms","params":{}},
        {"jsonrpc":"2.0","id":2,"method":"Room.Nope","params":{}},
        {"jsonrpc":"2.0","id":"c","method":"Room.ListParticipants","params":{}},
        5,
        {"jsonrpc":"2.0","id":"e","method":"Room.DestroyRoom","params":{"roomId":"nope"}}
    ]"#;
    let (status, answer) = srv.raw_rpc(j, Some(&token), batch).await;
    assert_eq!(status, 200);
    let answers = answer.as_array().expect("an array of answers");
    let got: Vec<(Value, Value)> = answers
        .iter()
        .map(|a| {
            assert_eq!(a["jsonrpc"], "2.0", "{a}");
            (a["id"].clone(), a["error"]["code"].clone())
        })
        .collect();
    assert_eq!(
        got,
        [
            (json!("a"), Value::Null),
            (json!(2), json!(-32601)),
            (json!("c"), json!(-32602)),
            (Value::Null, json!(-32600)),
            (json!("e"), json!(-11004)),
        ]
    );
    assert_eq!(answers[0]["result"], json!([]), "{answer}");
    // One call is a batch of one: an array of one answer.
    let (_, answer) = srv
        .raw_rpc(
            j,
            Some(&token),
            r#"[{"jsonrpc":"2.0","id":"1","method":"Room.ListRooms","params":{}}]"#,
        )
        .await;
    assert_eq!(answer.as_array().map(Vec::len), Some(1), "{answer}");
    // The scheme word of the token is case-insensitive (RFC 9110 §11.1).
    for scheme in ["bearer", "BEARER"] {
        let res = reqwest::Client::new()
            .post(format!("{}/api/rpc", srv.live_url))
            .header("authorization", format!("{scheme} {token}"))
            .header("content-type", j)
            .body(r#"{"jsonrpc":"2.0","id":"1","method":"Room.ListRooms","params":{}}"#)
            .send()
            .await
            .unwrap();
        let answer: Value = res.json().await.unwrap();
        assert_eq!(answer["result"], json!([]), "{scheme}: {answer}");
    }
    // An empty array is one -32600, not an array; a broken one is a parse error.
    for (body, code) in [("[]", -32600), (" [ ] ", -32600), ("[{]", -32700)] {
        let (status, answer) = srv.raw_rpc(j, Some(&token), body).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(answer["id"], Value::Null, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
    }
}
