//! The gateway end to end over real instance processes (`tests/instance.py`): weighted
//! traffic, mirroring, bodies up to the limit, timeouts, kept-alive connections.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::common::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test]
async fn traffic_follows_the_weights_exactly_and_mirroring_answers_from_one() {
    let s = spawn(|_, _| {}).await;
    s.image("echo").await;
    let key = s.endpoint("split", 1).await;
    s.deploy("split", custom("blue", json!({"NAME": "blue"})))
        .await;
    s.deploy("split", custom("green", json!({"NAME": "green"})))
        .await;
    s.available("split", "blue").await;
    let green = s.available("split", "green").await;
    assert_eq!(
        green["weight"], 0,
        "a later deployment gets no traffic until it is set"
    );
    let e = s.get("/endpoints/split").await;
    assert_eq!(e["traffic"]["percent"]["blue"], 100.0);

    let count = |n: usize| {
        let s = &s;
        let key = key.clone();
        async move {
            let mut seen: HashMap<String, usize> = HashMap::new();
            for _ in 0..n {
                let (status, v) = s.invoke("split", Some(&key), "/").await;
                assert_eq!(status, StatusCode::OK);
                *seen
                    .entry(v["name"].as_str().unwrap().to_owned())
                    .or_default() += 1;
            }
            seen
        }
    };
    let (status, t) = s
        .put(
            "/endpoints/split/traffic",
            json!({"weights": {"blue": 30, "green": 70}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{t}");
    assert_eq!(t["percent"]["green"], 70.0);
    let seen = count(100).await;
    assert_eq!((seen["blue"], seen["green"]), (30, 70));

    let (status, t) = s
        .put("/endpoints/split/traffic", json!({"ratio": "1:2"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{t}");
    assert_eq!(
        (
            t["weights"]["blue"].as_u64(),
            t["weights"]["green"].as_u64()
        ),
        (Some(1), Some(2))
    );
    let seen = count(99).await;
    assert_eq!((seen["blue"], seen["green"]), (33, 66));
    // Shown percentages sum to exactly 100 (largest remainder), not 33.3 + 66.7.
    assert_eq!(
        (
            t["percent"]["blue"].as_f64(),
            t["percent"]["green"].as_f64()
        ),
        (Some(33.0), Some(67.0))
    );
    // A 0 part gives its deployment no calls, as long as one part is not 0.
    let (status, t) = s
        .put("/endpoints/split/traffic", json!({"ratio": "0:1"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{t}");
    assert_eq!(t["percent"]["blue"], 0.0);
    let seen = count(10).await;
    assert_eq!((seen.get("blue"), seen["green"]), (None, 10));
    let (status, t) = s
        .put("/endpoints/split/traffic", json!({"ratio": "0:0"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{t}");
    let (status, _) = s
        .put(
            "/endpoints/split/traffic",
            json!({"ratio": "3:1", "deployments": ["green", "blue"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let seen = count(40).await;
    assert_eq!((seen["blue"], seen["green"]), (10, 30));

    // Bad traffic leaves the split as it was.
    for bad in [
        json!({"weights": {"blue": 33, "green": 67}}),
        json!({"weights": {"blue": 30, "green": 60}}),
        json!({"weights": {"blue": 50, "green": 55}}),
        json!({"weights": {"blue": 50, "ghost": 50}}),
        json!({"weights": {"blue": 105}}),
        json!({"ratio": "1:10001"}),
        json!({"ratio": "a:b"}),
        json!({"ratio": "1:2:3"}),
        json!({"ratio": "1:2", "deployments": ["blue", "ghost"]}),
        json!({"ratio": "1:2", "weights": {"blue": 100}}),
        json!({}),
    ] {
        let (status, v) = s.put("/endpoints/split/traffic", bad.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad} → {v}");
        assert_eq!(v["error"]["code"], "invalid_field");
    }
    let seen = count(4).await;
    assert_eq!((seen["blue"], seen["green"]), (1, 3));

    // Mirroring: both get every call, green answers; blue's failure never reaches the caller.
    let (status, m) = s
        .put("/endpoints/split/mirroring", json!({"enabled": true}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{m}");
    let (status, m) = s
        .put(
            "/endpoints/split/mirroring",
            json!({"enabled": true, "responder": "green"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{m}");
    let blue = s.get("/endpoints/split/deployments/blue").await;
    let blue_port = blue["instances"][0]["port"].as_u64().unwrap();
    let before = instance_calls(&s.http, blue_port).await;
    let seen = count(20).await;
    assert_eq!(seen.get("green"), Some(&20));
    eventually(
        Duration::from_secs(30),
        "blue gets every mirrored call",
        async || match instance_calls(&s.http, blue_port).await {
            n if n >= before + 20 => Ok(()),
            n => Err(format!("{} of 20", n - before)),
        },
    )
    .await;
    let (status, v) = s.invoke("split", Some(&key), "/crash-if/blue").await;
    assert_eq!(
        (status, v["name"].as_str()),
        (StatusCode::OK, Some("green")),
        "{v}"
    );
    assert_eq!(
        s.delete("/endpoints/split/deployments/green").await,
        StatusCode::CONFLICT
    );
    s.service.stop().await;
}

#[tokio::test]
async fn bodies_are_proxied_whole_up_to_20_mb_and_refused_past_it() {
    let s = spawn(|_, _| {}).await;
    s.image("echo").await;
    let key = s.endpoint("big", 1).await;
    s.deploy("big", custom("app", json!({}))).await;
    s.available("big", "app").await;
    let url = format!("{}/endpoints/big/upload", s.gateway);
    const MB: usize = 1024 * 1024;
    for len in [1, 10 * MB, 10 * MB + 1, 15 * MB, 20 * MB] {
        let body: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let want = {
            use sha2::Digest as _;
            hex::encode(sha2::Sha256::digest(&body))
        };
        let res = s
            .http
            .post(&url)
            .bearer_auth(&key)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{len}");
        let v: Value = res.json().await.unwrap();
        assert_eq!(
            (v["body_len"].as_u64(), v["sha256"].as_str()),
            (Some(len as u64), Some(want.as_str()))
        );
    }
    // Over 20 MB, with a length or chunked: 413 in the error shape.
    let res = s
        .http
        .post(&url)
        .bearer_auth(&key)
        .body(vec![0u8; 20 * MB + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        res.json::<Value>().await.unwrap()["error"]["code"],
        "payload_too_large"
    );
    let chunks = (0..21).map(|_| Ok::<_, std::io::Error>(vec![1u8; MB]));
    let res = s
        .http
        .post(&url)
        .bearer_auth(&key)
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // The instance is still fine.
    assert_eq!(s.invoke("big", Some(&key), "/").await.0, StatusCode::OK);
    s.service.stop().await;
}

#[tokio::test]
async fn an_instance_that_does_not_answer_in_time_is_a_504() {
    let s = spawn(|_, gateway| gateway.upstream_timeout_s = 1).await;
    s.image("echo").await;
    let key = s.endpoint("slow", 1).await;
    s.deploy("slow", custom("app", json!({}))).await;
    s.available("slow", "app").await;
    let started = Instant::now();
    let (status, v) = s.invoke("slow", Some(&key), "/slow").await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (StatusCode::GATEWAY_TIMEOUT, Some("gateway_timeout")),
        "{v}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(s.invoke("slow", Some(&key), "/").await.0, StatusCode::OK);
    s.service.stop().await;
}

#[tokio::test]
async fn a_kept_alive_connection_the_instance_closed_is_replaced() {
    let s = spawn(|_, _| {}).await;
    s.image("echo").await;
    let key = s.endpoint("idle", 1).await;
    s.deploy("idle", custom("app", json!({"IDLE_TIMEOUT": "0.2"})))
        .await;
    s.available("idle", "app").await;
    for _ in 0..3 {
        let (status, v) = s.invoke("idle", Some(&key), "/").await;
        assert_eq!(status, StatusCode::OK, "{v}");
        // Deliberate: long enough for the instance to close the connection kep keeps for the
        // next call.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    s.service.stop().await;
}
