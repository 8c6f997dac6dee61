//! Deployments end to end: a real server on port 0 (admin and gateway listeners), real
//! instance processes (`tests/instance.py`): probes, restarts, broken commands, roll-overs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
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

/// An endpoint made with the API key the operator gives (a CI's fixed one) lets its callers
/// in with it; the key is 8 to 256 printable characters, checked at, below and above, and
/// a refused one makes nothing.
#[tokio::test]
async fn an_endpoint_takes_the_api_key_it_is_given() {
    let s = spawn(|_, _| {}).await;
    for key in [
        "7 chars".to_owned(),
        "k".repeat(257),
        "tab\tkey!".to_owned(),
    ] {
        let (status, v) = s
            .post("/endpoints", json!({"name": "given", "api_key": key}))
            .await;
        assert_eq!(
            (status, v["error"]["field"].as_str()),
            (StatusCode::BAD_REQUEST, Some("api_key")),
            "{v}"
        );
    }
    assert_eq!(s.get("/endpoints").await, json!([]));

    let (status, v) = s
        .post(
            "/endpoints",
            json!({"name": "given", "api_key": "8 chars!"}),
        )
        .await;
    assert_eq!(
        (status, v["api_key"].as_str()),
        (StatusCode::CREATED, Some("8 chars!")),
        "{v}"
    );
    let longest = "k".repeat(256);
    let (status, _) = s
        .post("/endpoints", json!({"name": "longest", "api_key": longest}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    // Past the key check (no deployment to answer yet), and a wrong key is not.
    for (endpoint, key) in [("given", "8 chars!"), ("longest", longest.as_str())] {
        assert_ne!(
            s.invoke(endpoint, Some(key), "/x").await.0,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(
        s.invoke("given", Some("8 chars?"), "/x").await.0,
        StatusCode::UNAUTHORIZED
    );
}
