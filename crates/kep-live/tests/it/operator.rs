//! The operator API of the live service.

use kep_api::live::CreateServiceRequest;
use kep_client::ClientError;
use kep_client::live::LiveClient;
use serde_json::Value;

use crate::common::{OPERATOR_TOKEN, rpc_code, spawn};

#[tokio::test]
async fn operator_calls_need_the_operator_token() {
    let srv = spawn(|_| {}).await;
    let admin_url = srv.admin.base_url().to_owned();
    let res = reqwest::Client::new()
        .get(format!("{admin_url}/admin/v1/live/services"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    assert_eq!(res.headers()["www-authenticate"], "Bearer");
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");

    let created = srv.create_service("svc").await;
    let dup = srv
        .admin
        .create_live_service(&CreateServiceRequest {
            service_id: Some("svc".into()),
            external_verifier_url: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(dup, ClientError::Api { status: 409, .. }));
    let bad = srv
        .admin
        .create_live_service(&CreateServiceRequest {
            service_id: Some("no:colons".into()),
            external_verifier_url: None,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(bad, ClientError::Api { status: 400, ref body } if body.contains("serviceId"))
    );
    let generated = srv
        .admin
        .create_live_service(&CreateServiceRequest::default())
        .await
        .unwrap();
    let listed = srv.admin.list_live_services().await.unwrap();
    assert_eq!(listed, ["svc", generated.service_id.as_str()]);
    let one = srv.admin.live_service("svc").await.unwrap();
    assert_eq!(
        (one.service_id.as_str(), one.external_verifier_url),
        ("svc", None)
    );
    assert!(matches!(
        srv.admin.live_service("ghost").await.unwrap_err(),
        ClientError::Api { status: 404, .. }
    ));

    // Rotation: the old admin secret stops working, the new one works.
    let rotated = srv.admin.rotate_live_secrets("svc").await.unwrap();
    let client = LiveClient::new(&srv.live_url);
    assert_eq!(
        rpc_code(
            &client
                .provision("svc", &created.admin_secret)
                .await
                .unwrap_err()
        ),
        -11002
    );
    client
        .provision("svc", &rotated.admin_secret)
        .await
        .unwrap();
    assert!(matches!(
        srv.admin.rotate_live_secrets("ghost").await.unwrap_err(),
        ClientError::Api { status: 404, .. }
    ));

    // Malformed JSON is answered in the operator error shape.
    let res = reqwest::Client::new()
        .post(format!("{admin_url}/admin/v1/live/services"))
        .bearer_auth(OPERATOR_TOKEN)
        .header("content-type", "application/json")
        .body("{oops")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_body");
}

/// Found by schema fuzzing (fuzz/schema.sh): a JSON array was read as the request object
/// (`[null, null]` created a service with a generated id), and a field of the wrong type was
/// a 422 where every other refusal of the operator API is a 400 naming the field.
#[tokio::test]
async fn an_operator_body_is_an_object_and_a_mistyped_field_is_a_400_naming_it() {
    let srv = spawn(|_| {}).await;
    let admin_url = srv.admin.base_url().to_owned();
    let cases = [
        (
            "POST",
            "/admin/v1/live/services",
            "[null, null]",
            "invalid_body",
            None,
        ),
        (
            "POST",
            "/admin/v1/live/services",
            "\"svc\"",
            "invalid_body",
            None,
        ),
        (
            "POST",
            "/admin/v1/live/services",
            r#"{"serviceId": 5}"#,
            "invalid_field",
            Some("serviceId"),
        ),
        (
            "PATCH",
            "/admin/v1/live/services/svc",
            "[]",
            "invalid_body",
            None,
        ),
        (
            "PATCH",
            "/admin/v1/live/services/svc",
            r#"{"externalVerifierUrl": ["http://x"]}"#,
            "invalid_field",
            Some("externalVerifierUrl"),
        ),
    ];
    for (method, path, body, code, field) in cases {
        let res = reqwest::Client::new()
            .request(method.parse().unwrap(), format!("{admin_url}{path}"))
            .bearer_auth(OPERATOR_TOKEN)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 400, "{method} {path} {body}");
        let answer: Value = res.json().await.unwrap();
        assert_eq!(
            answer["error"]["code"], code,
            "{method} {path} {body}: {answer}"
        );
        assert_eq!(answer["error"]["field"].as_str(), field, "{answer}");
    }
    assert!(srv.admin.list_live_services().await.unwrap().is_empty());
}

/// Found by schema fuzzing (fuzz/schema.sh): a path segment that does not parse was answered
/// as plain text, not in the operator API's error shape.
#[tokio::test]
async fn an_operator_path_that_does_not_parse_is_a_400_in_the_operator_shape() {
    let srv = spawn(|_| {}).await;
    let res = reqwest::Client::new()
        .get(format!(
            "{}/admin/v1/live/services/%FF",
            srv.admin.base_url()
        ))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let answer: Value = res.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "invalid_path", "{answer}");
}
