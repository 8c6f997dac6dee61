//! Model serving end to end: a real server on port 0 (admin and gateway listeners), real
//! instance processes (`tests/instance.py`), real probes, restarts and proxying.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use kep_serving::QuotaSettings;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn a_custom_image_is_deployed_probed_and_called_with_its_key() {
    let s = spawn(|_, _| {}).await;
    s.image("echo").await;
    let key = s.endpoint("demo", 2).await;
    let (_, e) = s.post("/endpoints", json!({"name": "other"})).await;
    let other_key = e["api_key"].as_str().unwrap().to_owned();
    assert_eq!(e["url"], format!("{}/endpoints/other", s.gateway));

    let created = s
        .deploy("demo", custom("blue", json!({"NAME": "blue"})))
        .await;
    assert_eq!(created["state"], "Progressing");
    assert_eq!(created["port"], 8080, "the documented default");
    let d = s.available("demo", "blue").await;
    let instances = d["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 2);
    assert!(
        instances
            .iter()
            .all(|i| i["state"] == "Running" && i["ready"] == true)
    );

    // Path and query go on unchanged; the API key does not; calls alternate between instances.
    let mut pids = HashMap::new();
    for _ in 0..10 {
        let (status, body) = s.invoke("demo", Some(&key), "/v1/predict?x=1").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["name"], "blue");
        assert_eq!(body["path"], "/v1/predict?x=1");
        assert_eq!(body["authorization"], Value::Null);
        *pids.entry(body["pid"].as_u64().unwrap()).or_insert(0) += 1;
    }
    assert_eq!(
        pids.values().copied().collect::<Vec<_>>(),
        vec![5, 5],
        "{pids:?}"
    );

    // An instance that closes its connections: each next call goes on a new one.
    for _ in 0..6 {
        let (status, body) = s.invoke("demo", Some(&key), "/close").await;
        assert_eq!(
            (status, body["path"].as_str()),
            (StatusCode::OK, Some("/close"))
        );
    }

    // No key, another endpoint's key, a wrong key, an unknown endpoint: 401 the same way.
    for (endpoint, k) in [
        ("demo", None),
        ("demo", Some(other_key.as_str())),
        ("demo", Some("nope")),
        ("ghost", Some(key.as_str())),
    ] {
        let res = s
            .http
            .get(format!("{}/endpoints/{endpoint}/x", s.gateway))
            .header(
                "authorization",
                k.map(|k| format!("Bearer {k}")).unwrap_or_default(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(res.headers()["www-authenticate"], "Bearer");
        let v: Value = res.json().await.unwrap();
        assert_eq!(v["error"]["code"], "unauthorized");
    }
    // The scheme word is case-insensitive (RFC 9110 §11.1).
    for scheme in ["bearer", "BEARER"] {
        let res = s
            .http
            .get(format!("{}/endpoints/demo/x", s.gateway))
            .header("authorization", format!("{scheme} {key}"))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{scheme}");
    }
    // An endpoint with no deployment: a clear 503.
    let (status, v) = s.invoke("other", Some(&other_key), "/").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(v["error"]["code"], "no_ready_instance");

    // Reissue: the old key stops working at once, the new one works.
    let (status, v) = s.post("/endpoints/demo/api-key", json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let new_key = v["api_key"].as_str().unwrap();
    assert_eq!(
        s.invoke("demo", Some(&key), "/").await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(s.invoke("demo", Some(new_key), "/").await.0, StatusCode::OK);

    // The instance's output is captured.
    let id = instances[0]["id"].as_str().unwrap();
    let res = s
        .http
        .get(format!(
            "{}/admin/v1/serving/endpoints/demo/deployments/blue/instances/{id}/logs",
            s.admin
        ))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(res.text().await.unwrap().contains("kep: starting"));

    // Deleting the endpoint stops its instances.
    let pids: Vec<u64> = instances
        .iter()
        .map(|i| i["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(s.delete("/endpoints/demo").await, StatusCode::NO_CONTENT);
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "{pid} still runs"
        );
    }
    assert_eq!(
        s.invoke("demo", Some(new_key), "/").await.0,
        StatusCode::UNAUTHORIZED
    );
    s.service.stop().await;
}

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
async fn unready_instances_leave_rotation_and_dead_ones_restart() {
    let s = spawn(|_, _| {}).await;
    s.image("echo").await;
    let key = s.endpoint("pods", 2).await;
    let mut body = custom("app", json!({"NAME": "app"}));
    body["liveness"] =
        json!({"http": {"path": "/health"}, "interval_s": 0.2, "failure_threshold": 2});
    s.deploy("pods", body).await;
    let d = s.available("pods", "app").await;
    let (a, b) = (&d["instances"][0], &d["instances"][1]);
    let (a_port, b_pid) = (a["port"].as_u64().unwrap(), b["pid"].as_u64().unwrap());

    // Instance a stops being ready: calls keep flowing, all to b, until a is back.
    let stop = CancellationToken::new();
    let flow = {
        let (http, url, key, stop) = (
            s.http.clone(),
            format!("{}/endpoints/pods/", s.gateway),
            key.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            let mut failures = 0;
            while !stop.is_cancelled() {
                let res = http.get(&url).bearer_auth(&key).send().await.unwrap();
                failures += usize::from(res.status() != StatusCode::OK);
                // Deliberate: paced, so that the calls span the whole change.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            failures
        })
    };
    s.http
        .post(format!("http://127.0.0.1:{a_port}/admin/unready"))
        .send()
        .await
        .unwrap();
    let d = s
        .wait_for("pods", "app", "lost a ready instance", |d| {
            d["instances"][0]["ready"] == false
        })
        .await;
    assert_eq!(d["state"], "Progressing");
    assert_eq!(
        d["instances"][0]["state"], "Running",
        "still running, only not ready"
    );
    for _ in 0..10 {
        let (_, v) = s.invoke("pods", Some(&key), "/").await;
        assert_eq!(v["pid"].as_u64(), Some(b_pid));
    }
    s.http
        .post(format!("http://127.0.0.1:{a_port}/admin/ready"))
        .send()
        .await
        .unwrap();
    s.available("pods", "app").await;
    stop.cancel();
    assert_eq!(
        flow.await.unwrap(),
        0,
        "no call failed while a left and rejoined"
    );

    // b is killed: it is restarted, with a new process, and the deployment comes back.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(b_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let d = s
        .wait_for("pods", "app", "restarted b", |d| {
            d["state"] == "Available" && d["instances"][1]["restarts"] == 1
        })
        .await;
    assert_ne!(d["instances"][1]["pid"].as_u64(), Some(b_pid));
    let events = s.get("/endpoints/pods/deployments/app/events").await;
    let kinds: Vec<(&str, &str)> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["kind"].as_str().unwrap(), e["to"].as_str().unwrap_or("")))
        .collect();
    assert!(kinds.contains(&("restart", "")), "{kinds:?}");
    assert!(kinds.contains(&("instance_state", "Failed")), "{kinds:?}");
    assert!(
        kinds.contains(&("deployment_state", "Progressing")),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&("deployment_state", "Available")),
        "{kinds:?}"
    );
    s.service.stop().await;
}

#[tokio::test]
async fn broken_commands_get_clear_states_and_disturb_nothing_else() {
    let s = spawn(|_, _| {}).await;
    s.image("echo").await;
    let (status, v) = s
        .post(
            "/images",
            json!({"name": "missing", "command": "/no/such/binary --flag"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    let good_key = s.endpoint("good", 1).await;
    s.deploy("good", custom("ok", json!({"NAME": "ok"}))).await;
    s.available("good", "ok").await;

    let key = s.endpoint("bad", 1).await;
    s.deploy(
        "bad",
        json!({"name": "nocmd", "type": "custom-image", "image": "missing"}),
    )
    .await;
    s.deploy("bad", custom("exits", json!({"MODE": "exit"})))
        .await;
    s.deploy("bad", custom("silent", json!({"MODE": "silent"})))
        .await;
    let mut sick = custom("sick", json!({"MODE": "sick"}));
    sick["readiness"] =
        json!({"http": {"path": "/health"}, "interval_s": 0.1, "failure_threshold": 2});
    s.deploy("bad", sick).await;
    let mut dying = custom("dying", json!({"MODE": "sick"}));
    dying["liveness"] =
        json!({"http": {"path": "/health"}, "interval_s": 0.1, "failure_threshold": 2});
    s.deploy("bad", dying).await;

    let reason = |d: &Value| {
        d["instances"][0]["reason"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let d = s
        .wait_for("bad", "nocmd", "reported the command", |d| {
            reason(d).contains("CommandNotFound")
        })
        .await;
    assert_eq!(
        (d["state"].as_str(), d["instances"][0]["state"].as_str()),
        (Some("Progressing"), Some("Pending"))
    );
    s.wait_for("bad", "exits", "crash-looped", |d| {
        d["instances"][0]["restarts"].as_u64() >= Some(2)
    })
    .await;
    let d = s
        .wait_for("bad", "exits", "shown in back-off", |d| {
            reason(d).contains("CrashLoopBackOff")
        })
        .await;
    // The seed: instances that repeatedly start and stop are shown `Running`, with the
    // restart back-off as the cause.
    assert_eq!(d["instances"][0]["state"], "Running", "{d}");
    assert_eq!(d["instances"][0]["ready"], false, "{d}");
    s.wait_for("bad", "silent", "failed its probe", |d| {
        reason(d).contains("readiness probe failed")
    })
    .await;
    let d = s
        .wait_for("bad", "sick", "failed its probe", |d| {
            reason(d).contains("status 500")
        })
        .await;
    assert_eq!(d["instances"][0]["state"], "Pending");
    // Ready, but failing its liveness probe: restarted again and again. Read while the cause
    // is shown: just after a restart the new process is Pending with none yet (seen in CI).
    let d = s
        .wait_for("bad", "dying", "was restarted, the cause shown", |d| {
            d["instances"][0]["restarts"].as_u64() >= Some(2)
                && (reason(d).contains("liveness probe failed")
                    || d["instances"][0]["state"] == "Running")
        })
        .await;
    assert!(
        reason(&d).contains("liveness probe failed") || d["instances"][0]["state"] == "Running",
        "{d}"
    );
    for deployment in ["nocmd", "exits", "silent", "sick"] {
        assert_eq!(
            s.get(&format!("/endpoints/bad/deployments/{deployment}"))
                .await["state"],
            "Progressing"
        );
    }
    let (status, v) = s.invoke("bad", Some(&key), "/").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert_eq!(v["error"]["code"], "no_ready_instance");
    let (status, v) = s.invoke("good", Some(&good_key), "/").await;
    assert_eq!((status, v["name"].as_str()), (StatusCode::OK, Some("ok")));
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

#[tokio::test]
async fn an_edit_rolls_the_instances_over_without_failing_a_call() {
    let s = spawn(|_, _| {}).await;
    s.image("echo").await;
    let key = s.endpoint("roll", 1).await;
    s.deploy("roll", custom("app", json!({"NAME": "v1"}))).await;
    let old = s.available("roll", "app").await["instances"][0]["pid"].clone();
    // Calls flow until the roll-over is through, each answered by the name it reached.
    let stop = CancellationToken::new();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let flow = {
        let (http, url, key, stop, seen) = (
            s.http.clone(),
            format!("{}/endpoints/roll/", s.gateway),
            key.clone(),
            stop.clone(),
            Arc::clone(&seen),
        );
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                let res = http.get(&url).bearer_auth(&key).send().await.unwrap();
                assert_eq!(res.status(), StatusCode::OK);
                let v: Value = res.json().await.unwrap();
                seen.lock()
                    .unwrap()
                    .push(v["name"].as_str().unwrap().to_owned());
                // Deliberate: paced, so that the calls span the whole roll-over.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let calls = || seen.lock().unwrap().len();
    eventually(
        Duration::from_secs(30),
        "a first call",
        async || match calls() {
            0 => Err("none yet"),
            _ => Ok(()),
        },
    )
    .await;
    let (status, v) = s
        .patch(
            "/endpoints/roll/deployments/app",
            json!({"env": {"NAME": "v2"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    // Once the old instance is gone, a call made after that reached the new one.
    s.wait_for("roll", "app", "rolled over", |d| {
        let instances = d["instances"].as_array().unwrap();
        d["state"] == "Available" && instances.len() == 1 && instances[0]["pid"] != old
    })
    .await;
    let before = calls();
    eventually(
        Duration::from_secs(30),
        "a call since",
        async || match calls() {
            n if n > before + 1 => Ok(()),
            n => Err(n),
        },
    )
    .await;
    stop.cancel();
    flow.await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.first().map(String::as_str), Some("v1"));
    assert_eq!(seen.last().map(String::as_str), Some("v2"), "{seen:?}");
    let d = s.available("roll", "app").await;
    assert_eq!(
        d["instances"].as_array().unwrap().len(),
        1,
        "the old instance is gone"
    );
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
