//! What a second line-by-line reading of seed 001 B found at the edges: an endpoint changed
//! in place, and an endpoint of zero instances.

use std::time::Duration;

use crate::common::*;
use reqwest::StatusCode;
use serde_json::json;

/// Every operator answer has the operator error body, 405 included; an endpoint's names
/// what never changes.
#[tokio::test]
async fn an_endpoint_is_not_changed_in_place_and_says_why() {
    let s = spawn(|_, _| {}).await;
    s.endpoint("ep", 1).await;
    for method in [reqwest::Method::PATCH, reqwest::Method::PUT] {
        let res = s
            .http
            .request(
                method.clone(),
                format!("{}/admin/v1/serving/endpoints/ep", s.admin),
            )
            .bearer_auth(OPERATOR_TOKEN)
            .json(&json!({"instance_count": 2}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::METHOD_NOT_ALLOWED, "{method}");
        let allow = res.headers()["allow"].to_str().unwrap().to_owned();
        assert!(allow.contains("GET") && allow.contains("DELETE"), "{allow}");
        let body: serde_json::Value = res.json().await.unwrap();
        assert_eq!(body["error"]["code"], "method_not_allowed", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        for named in ["instance_type", "instance_count"] {
            assert!(message.contains(named), "{message}");
        }
    }
    // Any other operator path too: the error body, not an empty one.
    let (status, body) = s.patch("/images", json!({})).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(body["error"]["code"], "method_not_allowed", "{body}");
}

/// The document names a deployment with zero instances as one that stays `Progressing`:
/// an endpoint of `instance_count: 0` is accepted, and its deployment never runs.
#[tokio::test]
async fn a_deployment_of_zero_instances_stays_progressing() {
    let s = spawn(|_, _| {}).await;
    s.image("echo").await;
    let key = s.endpoint("none", 0).await;
    let made = s.deploy("none", custom("dd", json!({}))).await;
    assert_eq!(made["state"], "Progressing", "{made}");
    for _ in 0..10 {
        let d = s.get("/endpoints/none/deployments/dd").await;
        assert_eq!(d["state"], "Progressing", "{d}");
        assert_eq!(d["instances"].as_array().map_or(0, Vec::len), 0, "{d}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, answer) = s.invoke("none", Some(&key), "/").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
}
