//! The management API's rules on a real server: every field at, under and over its bound,
//! the model types, how bodies and queries are read, the platform clock.

use std::time::Duration;

use crate::common::*;
use kep_serving::QuotaSettings;
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test]
async fn every_field_rule_at_under_and_over_its_bound() {
    let s = spawn(|settings, _| {
        settings.quota = QuotaSettings {
            cpu: 3.0,
            memory_mb: 65536,
            gpu: Some(0),
        };
    })
    .await;
    s.image("echo").await;
    s.endpoint("rules", 1).await;
    let sr = &s;
    let deploy = |body: Value| async move { sr.post("/endpoints/rules/deployments", body).await };
    let bad = |body: Value, field: &'static str| async move {
        let (status, v) = sr.post("/endpoints/rules/deployments", body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body} → {v}");
        assert_eq!(v["error"]["field"], field, "{body} → {v}");
    };
    let base = |name: &str| json!({"name": name, "type": "custom-image", "image": "echo"});
    let with = |mut v: Value, k: &str, x: Value| {
        v[k] = x;
        v
    };

    // Name: 2 to 63 of a-z 0-9 -, a letter first, no hyphen last.
    bad(base("a"), "name").await;
    bad(base(&"a".repeat(64)), "name").await;
    for name in ["Ab", "9ab", "ab-", "a_b", "a b"] {
        bad(base(name), "name").await;
    }
    assert_eq!(deploy(base("ab")).await.0, StatusCode::CREATED);
    assert_eq!(deploy(base(&"a".repeat(63))).await.0, StatusCode::CREATED);
    assert_eq!(
        deploy(base("ab")).await.0,
        StatusCode::CONFLICT,
        "unique per endpoint"
    );
    // The quota (3 cpu, 1 cpu each) is now one deployment from full.
    bad(
        with(base("d1"), "description", json!("x".repeat(1025))),
        "description",
    )
    .await;
    let env51: serde_json::Map<String, Value> =
        (0..51).map(|i| (format!("V{i}"), json!(""))).collect();
    bad(with(base("e1"), "env", Value::Object(env51)), "env").await;
    bad(with(base("e2"), "env", json!({"A": "v"})), "env.A").await;
    bad(with(base("e3"), "env", json!({"1A": "v"})), "env.1A").await;
    bad(
        with(base("e4"), "env", json!({"AB": "v".repeat(1025)})),
        "env.AB",
    )
    .await;
    bad(with(base("e5"), "env", json!({"PORT": "1"})), "env.PORT").await;
    // No process environment holds a NUL: refused at creation, not an instance that
    // never starts.
    bad(with(base("e6"), "env", json!({"AB": "a\0b"})), "env.AB").await;
    bad(
        with(
            base("p1"),
            "readiness",
            json!({"http": {"path": "/"}, "tcp": {}}),
        ),
        "readiness",
    )
    .await;
    bad(
        with(
            base("p2"),
            "liveness",
            json!({"tcp": {}, "failure_threshold": 0}),
        ),
        "liveness.failure_threshold",
    )
    .await;
    bad(json!({"name": "i1", "type": "custom-image"}), "image").await;
    bad(
        json!({"name": "i2", "type": "custom-image", "image": "ghost"}),
        "image",
    )
    .await;
    bad(
        json!({"name": "i3", "type": "nonsense", "image": "echo"}),
        "type",
    )
    .await;
    let env50: serde_json::Map<String, Value> = (0..50)
        .map(|i| (format!("V{i}"), json!("v".repeat(1024))))
        .collect();
    let full = with(
        with(base("full"), "env", Value::Object(env50)),
        "description",
        json!("x".repeat(1024)),
    );
    let (status, v) = deploy(full).await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    let (status, v) = deploy(base("over")).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("quota_exceeded")),
        "{v}"
    );
    assert_eq!(s.get("/quota").await["used"]["cpu"], 3.0);
    // An endpoint none of whose deployments could ever fit the whole quota (4 × 1 cpu of
    // 3) is refused at creation: its instance settings cannot change later. At the quota
    // (3 × 1 cpu) it is created, though this workspace is full now.
    let (status, v) = s
        .post("/endpoints", json!({"name": "huge", "instance_count": 4}))
        .await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("quota_exceeded")),
        "{v}"
    );
    let (status, v) = s
        .post("/endpoints", json!({"name": "fits", "instance_count": 3}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{v}");

    // Unknown endpoint and deployment.
    let (status, _) = s.post("/endpoints/ghost/deployments", base("x1")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = s
        .call(
            reqwest::Method::GET,
            "/endpoints/rules/deployments/ghost",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Editing: only the editable fields; not once the image is deleted.
    let (status, v) = s
        .patch("/endpoints/rules/deployments/ab", json!({"name": "cd"}))
        .await;
    assert_eq!(
        (status, v["error"]["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("name"))
    );
    let (status, v) = s
        .patch(
            "/endpoints/rules/deployments/ab",
            json!({"description": "now described"}),
        )
        .await;
    assert_eq!(
        (status, v["description"].as_str()),
        (StatusCode::OK, Some("now described")),
        "{v}"
    );
    assert_eq!(s.delete("/images/echo").await, StatusCode::NO_CONTENT);
    let (status, v) = s
        .patch(
            "/endpoints/rules/deployments/ab",
            json!({"description": "again"}),
        )
        .await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("source_deleted")),
        "{v}"
    );
    assert_eq!(
        s.get("/endpoints/rules/deployments/ab").await["source_deleted"],
        true
    );

    // Endpoint fields.
    for (body, field) in [
        (json!({"name": "x"}), "name"),
        (
            json!({"name": "ok1", "instance_type": "huge"}),
            "instance_type",
        ),
        (
            json!({"name": "ok2", "instance_count": 11}),
            "instance_count",
        ),
        (json!({"name": "ok3", "protocol": "ftp"}), "protocol"),
        (
            json!({"name": "ok4", "description": "x".repeat(1025)}),
            "description",
        ),
    ] {
        let (status, v) = s.post("/endpoints", body.clone()).await;
        assert_eq!(
            (status, v["error"]["field"].as_str()),
            (StatusCode::BAD_REQUEST, Some(field)),
            "{body}"
        );
    }
    let (status, _) = s.post("/endpoints", json!({"name": "rules"})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    s.service.stop().await;
}

#[tokio::test]
async fn models_follow_the_type_rules_and_at_most_two_per_endpoint() {
    let s = spawn(|_, _| {}).await;
    let sr = &s;
    let models = made_models();
    let mlp = std::fs::read(models.path().join("mlp.onnx")).unwrap();
    let size = mlp.len() as u64;
    let mlp = &mlp;
    let upload_bytes = |name: &'static str, framework: &'static str, bytes: Vec<u8>| async move {
        let form = reqwest::multipart::Form::new()
            .text("name", name)
            .text("framework", framework)
            .part(
                "file",
                reqwest::multipart::Part::bytes(bytes).file_name("m.onnx"),
            );
        let res = sr
            .http
            .post(format!("{}/admin/v1/serving/models", sr.admin))
            .bearer_auth(OPERATOR_TOKEN)
            .multipart(form)
            .send()
            .await
            .unwrap();
        (res.status(), res.json::<Value>().await.unwrap())
    };
    let upload = |name, framework| upload_bytes(name, framework, mlp.clone());
    let (status, m) = upload("tf-a", "tensorflow").await;
    assert_eq!(status, StatusCode::CREATED, "{m}");
    assert_eq!(
        (m["size"].as_u64(), m["framework"].as_str()),
        (Some(size), Some("tensorflow"))
    );
    assert_eq!(m["inputs"][0]["name"], "x");
    // A file the engine cannot read as a model is refused, and not kept.
    let (status, v) = upload_bytes("junk", "onnx", vec![8u8; 64]).await;
    assert_eq!(
        (status, v["error"]["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("file")),
        "{v}"
    );
    assert_eq!(upload("tf-b", "tensorflow").await.0, StatusCode::CREATED);
    assert_eq!(upload("pt-c", "pytorch").await.0, StatusCode::CREATED);
    assert_eq!(upload("tf-a", "tensorflow").await.0, StatusCode::CONFLICT);
    let (status, v) = upload("bad-fw", "caffe").await;
    assert_eq!(
        (status, v["error"]["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("framework"))
    );

    s.endpoint("models", 1).await;
    let d =
        |name: &str, kind: &str, model: &str| json!({"name": name, "type": kind, "model": model});
    let (status, v) = s
        .post(
            "/endpoints/models/deployments",
            d("tfs", "tensorflow-serving", "pt-c"),
        )
        .await;
    assert_eq!(
        (status, v["error"]["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("model")),
        "TF Serving takes TensorFlow only"
    );
    let one = s
        .deploy("models", d("one", "tensorflow-serving", "tf-a"))
        .await;
    assert_eq!(
        one.get("port"),
        None,
        "a model server's port is kep's business"
    );
    s.deploy("models", d("two", "triton", "pt-c")).await;
    s.deploy("models", d("again", "triton", "tf-a")).await;
    let (status, v) = s
        .post(
            "/endpoints/models/deployments",
            d("three", "triton", "tf-b"),
        )
        .await;
    assert_eq!(
        (status, v["error"]["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("model")),
        "{v}"
    );
    let (status, v) = s
        .post(
            "/endpoints/models/deployments",
            json!({"name": "pp", "type": "triton", "model": "tf-b", "port": 9000}),
        )
        .await;
    assert_eq!(
        (status, v["error"]["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("port"))
    );
    let (status, v) = s
        .post(
            "/endpoints/models/deployments",
            json!({"name": "cc", "type": "cosmos", "model": "tf-a"}),
        )
        .await;
    assert_eq!(
        (status, v["error"]["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("script"))
    );
    assert_eq!(s.get("/models").await.as_array().unwrap().len(), 3);
    s.service.stop().await;
}

/// Found by schema fuzzing (fuzz/schema.sh): an integer sent as `1.0` was refused although
/// its schema (JSON Schema) counts it an integer, and an alert condition sent as an array
/// (`[true, 5]`) was read field by field and saved.
#[tokio::test]
async fn management_bodies_are_read_as_their_schema_reads_them() {
    let srv = spawn(|_, _| {}).await;
    let (s, v) = srv
        .post(
            "/endpoints",
            json!({"name": "whole", "instance_count": 1.0}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["instance_count"], 1);

    let (s, v) = srv
        .put(
            "/endpoints/whole/alerts",
            json!({"enabled": false, "conditions": {"qps": [true, 5]}}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["field"], "conditions.qps", "{v}");
    assert_eq!(
        srv.get("/endpoints/whole/alerts").await["conditions"]["qps"],
        json!({"enabled": false}),
        "nothing was saved"
    );
    let (s, v) = srv.post("/endpoints", json!(["other", null])).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_body"))
    );
}

/// Found by schema fuzzing (fuzz/schema.sh): a query out of the integers' range, or negative
/// where it counts bytes, was answered as plain text, not in the operator API's error shape.
#[tokio::test]
async fn a_management_query_that_does_not_parse_is_a_400_in_the_operator_shape() {
    let srv = spawn(|_, _| {}).await;
    for path in [
        "/endpoints/e/alerts/history?limit=9223372036854775808",
        "/endpoints/e/deployments/d/events?limit=x",
        "/endpoints/e/deployments/d/instances/i/logs?tail_bytes=-1",
    ] {
        let (s, v) = srv.call(reqwest::Method::GET, path, None).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path}: {v}");
        assert_eq!(v["error"]["code"], "invalid_query", "{path}: {v}");
    }
}

/// Created, updated and event dates are read from the platform's clock.
#[tokio::test]
async fn dates_are_read_from_the_platform_clock() {
    let clock =
        kep_core::clock::Clock::manual(jiff::Timestamp::from_second(1_700_000_000).unwrap());
    let s = spawn_on(clock.clone(), |_, _| {}).await;
    s.image("echo").await;
    assert_eq!(
        s.get("/images/echo").await["created_at"],
        "2023-11-14T22:13:20Z"
    );
    s.endpoint("dated", 0).await;
    assert_eq!(
        s.get("/endpoints/dated").await["created_at"],
        "2023-11-14T22:13:20Z"
    );
    s.deploy("dated", custom("app", json!({}))).await;
    let events = "/endpoints/dated/deployments/app/events";
    let first = eventually(Duration::from_secs(10), "the first event", async || {
        let v = s.get(events).await;
        v[0].is_object().then(|| v[0].clone()).ok_or(v)
    })
    .await;
    assert_eq!(first["at"], "2023-11-14T22:13:20Z", "{first}");

    clock.advance(Duration::from_secs(60));
    let (status, d) = s
        .patch(
            "/endpoints/dated/deployments/app",
            json!({"description": "later"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{d}");
    assert_eq!(d["created_at"], "2023-11-14T22:13:20Z");
    assert_eq!(d["updated_at"], "2023-11-14T22:14:20Z");
    s.service.stop().await;
}
