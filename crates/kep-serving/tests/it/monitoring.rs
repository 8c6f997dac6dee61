//! Monitoring and alerts end to end: each condition is caused for real (calls through the
//! gateway, an instance answering 500, one killed, one burning CPU) and the alerts are
//! received by a real HTTP server playing the team-messaging webhook.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode as AxumStatus;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// An incoming webhook: records each `{"text"}` it accepts; can be told to fail or stall.
#[derive(Clone, Default)]
struct Hook {
    url: String,
    texts: Arc<Mutex<Vec<String>>>,
    attempts: Arc<AtomicU32>,
    /// The next this many posts are answered 500.
    fail_next: Arc<AtomicU32>,
    /// The next this many posts are answered after 2 s.
    stall_next: Arc<AtomicU32>,
}

fn take_one(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

async fn receive(State(hook): State<Hook>, Json(body): Json<Value>) -> AxumStatus {
    hook.attempts.fetch_add(1, Ordering::SeqCst);
    if take_one(&hook.stall_next) {
        // Deliberate: a webhook that answers past kep's attempt timeout.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    if take_one(&hook.fail_next) {
        return AxumStatus::INTERNAL_SERVER_ERROR;
    }
    let text = body["text"].as_str().expect("a text field").to_owned();
    hook.texts.lock().unwrap().push(text);
    AxumStatus::OK
}

impl Hook {
    async fn start() -> Hook {
        Hook::start_on("127.0.0.1:0".parse().unwrap()).await
    }

    async fn start_on(addr: SocketAddr) -> Hook {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let hook = Hook {
            url: format!("http://{}/hook", listener.local_addr().unwrap()),
            ..Hook::default()
        };
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(hook.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        hook
    }

    fn texts(&self) -> Vec<String> {
        self.texts.lock().unwrap().clone()
    }

    fn count(&self, needle: &str) -> usize {
        self.texts().iter().filter(|t| t.contains(needle)).count()
    }

    /// Waits up to 30 s for an alert whose text contains `needle`.
    async fn wait_for(&self, needle: &str) -> String {
        self.wait_for_all(&[needle]).await
    }

    /// The first alert whose text holds every one of `needles`.
    async fn wait_for_all(&self, needles: &[&str]) -> String {
        let what = format!("an alert with {needles:?}");
        eventually(Duration::from_secs(30), &what, async || {
            let texts = self.texts();
            match texts.iter().find(|t| needles.iter().all(|n| t.contains(n))) {
                Some(t) => Ok(t.clone()),
                None => Err(format!("{texts:#?}")),
            }
        })
        .await
    }
}

fn conditions(on: &[(&str, Option<f64>)]) -> Value {
    on.iter()
        .map(|(name, threshold)| {
            let mut c = json!({"enabled": true});
            if let Some(t) = threshold {
                c["threshold"] = json!(t);
            }
            (name.to_string(), c)
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

async fn set_alerts(server: &Server, endpoint: &str, url: &str, on: &[(&str, Option<f64>)]) {
    let (s, v) = server
        .put(
            &format!("/endpoints/{endpoint}/alerts"),
            json!({"enabled": true, "webhook_url": url, "conditions": conditions(on)}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
}

/// Waits until the monitor has taken `n` more samples of the endpoint.
async fn samples(server: &Server, endpoint: &str, n: usize) {
    let path = format!("/endpoints/{endpoint}/metrics");
    let mut seen = vec![server.get(&path).await["at"].clone()];
    eventually(
        Duration::from_secs(30),
        &format!("{n} samples"),
        async || {
            let at = server.get(&path).await["at"].clone();
            if seen.last() != Some(&at) {
                seen.push(at);
            }
            if seen.len() > n {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            }
        },
    )
    .await;
}

/// Polls the alert history until its newest alert satisfies `done`; failing, shows the
/// endpoint's calls as the monitor last sampled them too.
async fn newest_alert(server: &Server, endpoint: &str, done: impl Fn(&Value) -> bool) -> Value {
    let path = format!("/endpoints/{endpoint}/alerts/history");
    let metrics = format!("/endpoints/{endpoint}/metrics");
    eventually(Duration::from_secs(30), "the history settles", async || {
        let h = server.get(&path).await;
        match h["alerts"].get(0) {
            Some(a) if done(a) => Ok(a.clone()),
            _ => Err(json!({"history": h, "calls": server.get(&metrics).await["calls"]})),
        }
    })
    .await
}

#[tokio::test]
async fn calls_statuses_and_state_changes_each_alert_once() {
    // One sample a second (the default): the rate a sample reads is its own second's calls,
    // so a burst's rate falls through the threshold once. With shorter samples the rate is
    // read over the last few, and their lengths vary on a loaded machine: on its way down it
    // rose back over the threshold with no new call, a second QPS alert (4 runs in 6 with
    // 200 ms samples, the serving tests running alongside).
    let server = spawn(|s, _| s.monitor_interval_ms = 1000).await;
    let hook = Hook::start().await;
    server.image("echo").await;
    let key = server.endpoint("watched", 1).await;
    set_alerts(
        &server,
        "watched",
        &hook.url,
        &[
            ("qps", Some(20.0)),
            ("status_4xx", None),
            ("status_5xx", None),
            ("state_progressing", None),
            ("state_available", None),
            ("monitoring_log", None),
        ],
    )
    .await;

    server
        .deploy("watched", custom("d1", json!({"NAME": "d1"})))
        .await;
    server.available("watched", "d1").await;
    hook.wait_for(
        "[kep] endpoint watched, deployment d1: state changed from Progressing to Available",
    )
    .await;

    // An instance answering 500: one alert naming the deployment; more 500s stay quiet.
    for _ in 0..3 {
        let (s, _) = server.invoke("watched", Some(&key), "/status/500").await;
        assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR);
    }
    let five = hook.wait_for("5XX answer").await;
    assert!(
        five.starts_with("[kep] endpoint watched, deployment d1: "),
        "{five}"
    );
    // A wrong key is the gateway's own 4XX answer: no deployment named.
    let (s, _) = server.invoke("watched", Some("wrong"), "/").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let four = hook.wait_for("4XX answer").await;
    assert_eq!(
        four,
        "[kep] endpoint watched: 1 4XX answer in the last sample"
    );

    // A burst of 100 calls, ten callers each making ten back to back, over 20 calls/s for
    // more than one sample: one QPS alert, not one per sample. (Rounds of ten with a pause
    // between them kept the rate close to the threshold on a loaded machine.)
    let caller = || async {
        for _ in 0..10 {
            let (s, _) = server.invoke("watched", Some(&key), "/").await;
            assert_eq!(s, StatusCode::OK);
        }
    };
    futures_util::future::join_all((0..10).map(|_| caller())).await;
    let qps = hook.wait_for("QPS").await;
    assert!(qps.starts_with("[kep] endpoint watched: QPS "), "{qps}");
    assert!(qps.ends_with("is at or above the threshold 20"), "{qps}");
    // The burst's rate has gone before the kill: the kill's own call, made while the rate
    // falls through the threshold, could lift it back over (a second QPS alert).
    eventually(
        Duration::from_secs(30),
        "the burst out of the rate window",
        async || {
            let m = server.get("/endpoints/watched/metrics").await;
            if m["calls"]["qps"].as_f64() == Some(0.0) {
                Ok(())
            } else {
                Err(m)
            }
        },
    )
    .await;

    // A killed instance: Available → Progressing, then back once it restarted.
    let (s, _) = server.invoke("watched", Some(&key), "/crash").await;
    assert_eq!(s, StatusCode::BAD_GATEWAY);
    hook.wait_for("state changed from Available to Progressing")
        .await;
    eventually(
        Duration::from_secs(30),
        "back to Available after the restart",
        async || match hook.count("state changed from Progressing to Available") {
            2.. => Ok(()),
            _ => Err(format!("{:#?}", hook.texts())),
        },
    )
    .await;

    // A few samples more, in which no condition that holds may alert again.
    samples(&server, "watched", 3).await;
    assert_eq!(hook.count("QPS"), 1, "{:#?}", hook.texts());
    assert_eq!(
        hook.count("5XX"),
        1,
        "the 502 of the kill is within the quiet spell"
    );
    assert_eq!(hook.count("4XX"), 1);

    // The history holds what was sent, newest first.
    let history = server.get("/endpoints/watched/alerts/history").await;
    let alerts = history["alerts"].as_array().unwrap();
    assert_eq!(alerts.len(), hook.texts().len(), "{history}");
    assert!(
        alerts
            .windows(2)
            .all(|w| w[0]["id"].as_i64() > w[1]["id"].as_i64())
    );
    assert!(
        alerts
            .iter()
            .all(|a| a["status"] == "sent" && a["attempts"] == 1)
    );
    assert_eq!(alerts[0]["condition"], "state_available");
    assert_eq!(alerts[0]["deployment"], "d1");
    let limited = server
        .get("/endpoints/watched/alerts/history?limit=2")
        .await;
    assert_eq!(limited["alerts"].as_array().unwrap().len(), 2);

    // The same calls, as the metrics show them.
    let m = server.get("/endpoints/watched/metrics").await;
    assert_eq!(m["endpoint"], "watched");
    assert!(m["calls"]["requests"].as_u64().unwrap() >= 105, "{m}");
    assert_eq!(m["calls"]["status"]["4xx"], 1);
    assert!(m["calls"]["status"]["5xx"].as_u64().unwrap() >= 4, "{m}");
    assert!(
        m["calls"]["latency_ms"]["p99"].as_f64().unwrap() > 0.0,
        "{m}"
    );
    let d = &m["deployments"][0];
    assert_eq!(d["name"], "d1");
    assert_eq!(d["calls"]["status"]["4xx"], 0, "the 401 was the gateway's");
    assert!(d["calls"]["status"]["2xx"].as_u64().unwrap() >= 100, "{m}");
}

#[tokio::test]
async fn cpu_and_memory_bounds_alert_from_the_instances_processes() {
    let server = spawn(|s, _| s.monitor_interval_ms = 200).await;
    let hook = Hook::start().await;
    server.image("echo").await;
    server.endpoint("burner", 1).await;
    set_alerts(
        &server,
        "burner",
        &hook.url,
        &[
            // Low, so that a burner starved for one 200 ms sample on a loaded machine
            // seldom leaves the condition (and enters it again, a new alert) below.
            ("cpu_upper", Some(10.0)),
            ("cpu_lower", Some(5.0)),
            // cpu-small has 2048 MiB: any Python process is over 0.1% and under 99%.
            ("memory_upper", Some(0.1)),
            ("memory_lower", Some(99.0)),
            ("gpu_upper", Some(1.0)),
        ],
    )
    .await;
    server
        .deploy("burner", custom("hot", json!({"BURN": "1"})))
        .await;
    server.deploy("burner", custom("idle", json!({}))).await;
    server.available("burner", "hot").await;

    // A sample taken while an interpreter was still starting may see the burner idle or
    // the idle one busy (on a loaded machine): wait for each bound from its own instance.
    hook.wait_for_all(&[
        "deployment hot: CPU use",
        "is at or above the threshold 10%",
    ])
    .await;
    hook.wait_for_all(&[
        "deployment idle: CPU use",
        "is at or below the threshold 5%",
    ])
    .await;
    // An interpreter's first sample may come before it holds 0.1% (2 MiB of its own
    // memory), so its lower bound's alert may come first: the upper one is waited for.
    for d in ["hot", "idle"] {
        let memory = format!("deployment {d}: memory use");
        hook.wait_for_all(&[&memory, "at or above the threshold 0.1%"])
            .await;
        hook.wait_for_all(&[&memory, "at or below the threshold 99%"])
            .await;
    }

    // One sample of a burner starved by a loaded machine can read under its bound although
    // the alert above already showed it over: the figure is waited for, not read once.
    let mut i = Value::Null;
    for _ in 0..100 {
        let m = server.get("/endpoints/burner/metrics").await;
        i = m["deployments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == "hot")
            .unwrap()["instances"][0]
            .clone();
        if i["cpu_cores"].as_f64().is_some_and(|c| c > 0.3) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(i["cpu_cores"].as_f64().unwrap() > 0.3, "{i}");
    assert!(i["cpu_percent"].as_f64().unwrap() > 30.0, "{i}");
    assert!(i["memory_bytes"].as_u64().unwrap() > 1 << 20, "{i}");
    assert!(i.get("gpu_percent").is_none(), "no GPU is read here");

    // Holding conditions stay quiet. Five samples pass here (waited for: a fixed second may
    // hold fewer on a loaded machine); an alert per sample would give five. Counted on the
    // burner's memory, which holds both its bounds whatever the load: starved on a loaded
    // CI machine, the burner left its CPU bounds and came back several times in five 200 ms
    // samples, a new alert each time, as the rule says. The CPU upper bound's 12-hour
    // repeat is the unit test `cpu_upper_repeats_while_it_holds_and_lower_bounds_do_not`.
    let before = hook.count("deployment hot: memory use");
    samples(&server, "burner", 5).await;
    let after = hook.count("deployment hot: memory use");
    assert_eq!(after, before, "{:#?}", hook.texts());
    assert_eq!(hook.count("GPU"), 0);
}

#[tokio::test]
async fn a_webhook_that_fails_stalls_or_is_down_loses_no_alert() {
    let server = spawn(|s, _| {
        s.monitor_interval_ms = 100;
        // Each wrong-key call is an alert of its own here.
        s.alert_status_quiet_s = 0;
        s.alert_retry_ms = 100;
        s.alert_timeout_s = 1;
        s.alert_attempts = 4;
    })
    .await;
    server.endpoint("flaky", 0).await;
    let hook = Hook::start().await;
    set_alerts(&server, "flaky", &hook.url, &[("status_4xx", None)]).await;
    let wrong_key = || server.invoke("flaky", Some("wrong"), "/");
    let watch = kep_client::activity::Watch {
        event: Some("alert".into()),
        ..Default::default()
    };
    let admin = kep_client::AdminClient::new(&server.admin, OPERATOR_TOKEN);
    let mut alerts = admin.events(&watch).await.unwrap();

    // Answered 500 twice, then accepted.
    hook.fail_next.store(2, Ordering::SeqCst);
    wrong_key().await;
    let a = newest_alert(&server, "flaky", |a| a["status"] == "sent").await;
    assert_eq!(a["attempts"], 3, "{a}");
    assert_eq!(hook.texts().len(), 1);
    assert_eq!(hook.attempts.load(Ordering::SeqCst), 3);

    // Stalled past the 1 s attempt timeout, then accepted.
    hook.stall_next.store(1, Ordering::SeqCst);
    wrong_key().await;
    let b = newest_alert(&server, "flaky", |b| {
        b["id"] != a["id"] && b["status"] == "sent"
    })
    .await;
    assert_eq!(b["attempts"], 2, "{b}");
    assert!(hook.texts().len() >= 2);

    // Down when the alert is raised, up before the retries run out.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = port.local_addr().unwrap();
    drop(port);
    set_alerts(
        &server,
        "flaky",
        &format!("http://{addr}/hook"),
        &[("status_4xx", None)],
    )
    .await;
    wrong_key().await;
    let c = newest_alert(&server, "flaky", |c| c["id"] != b["id"]).await;
    newest_alert(&server, "flaky", |c| c["attempts"].as_u64() >= Some(1)).await;
    let late = Hook::start_on(addr).await;
    let c = newest_alert(&server, "flaky", |x| {
        x["id"] == c["id"] && x["status"] == "sent"
    })
    .await;
    assert!(c["attempts"].as_u64().unwrap() >= 2, "{c}");
    assert_eq!(
        late.texts(),
        ["[kep] endpoint flaky: 1 4XX answer in the last sample"]
    );

    // Past the retry budget: recorded as failed, with why.
    late.fail_next.store(100, Ordering::SeqCst);
    wrong_key().await;
    let d = newest_alert(&server, "flaky", |d| {
        d["id"] != c["id"] && d["status"] == "failed"
    })
    .await;
    assert_eq!(d["attempts"], 4);
    assert_eq!(d["error"], "the webhook answered 500 Internal Server Error");

    // Each delivery, and the one given up, is in the activity.
    for (event, alert) in [
        ("alert.sent", &a),
        ("alert.sent", &b),
        ("alert.sent", &c),
        ("alert.failed", &d),
    ] {
        let kep_client::activity::Watched::Event(e) = alerts.next().await.unwrap().unwrap() else {
            panic!("lagged");
        };
        assert_eq!((e.event.as_str(), e.object.as_str()), (event, "flaky"));
        assert_eq!(e.detail["id"], alert["id"], "{e:?}");
    }
}

#[tokio::test]
async fn a_webhook_that_redirects_is_not_followed() {
    let server = spawn(|s, _| {
        s.monitor_interval_ms = 100;
        s.alert_retry_ms = 100;
        s.alert_attempts = 2;
    })
    .await;
    server.endpoint("moved", 0).await;
    let hook = Hook::start().await;
    // A webhook URL that answers every call with a redirect (307) to the real one.
    let to = hook.url.clone();
    let app = axum::Router::new().fallback(move || {
        let to = to.clone();
        async move { axum::response::Redirect::temporary(&to) }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let redirecting = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    set_alerts(&server, "moved", &redirecting, &[("status_4xx", None)]).await;
    server.invoke("moved", Some("wrong"), "/").await;
    let a = newest_alert(&server, "moved", |a| a["status"] == "failed").await;
    assert_eq!(a["attempts"], 2, "{a}");
    assert_eq!(a["error"], "the webhook answered 307 Temporary Redirect");
    assert_eq!(hook.attempts.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn alert_settings_follow_the_table_and_metrics_can_be_turned_off() {
    let server = spawn(|s, g| {
        s.monitor_interval_ms = 100;
        g.metrics = false;
    })
    .await;
    server.image("echo").await;
    let key = server.endpoint("quiet", 1).await;

    let settings = server.get("/endpoints/quiet/alerts").await;
    assert_eq!(settings["enabled"], false);
    assert_eq!(settings["conditions"].as_object().unwrap().len(), 12);
    assert_eq!(
        settings["conditions"]["cpu_upper"],
        json!({"enabled": false})
    );

    let bad = [
        (json!({"enabled": true}), "webhook_url"),
        (
            json!({"enabled": true, "webhook_url": "mailto:ops@example.com"}),
            "webhook_url",
        ),
        (
            json!({"enabled": false, "conditions": {"qps": {"enabled": true}}}),
            "conditions.qps.threshold",
        ),
        (
            json!({"enabled": false, "conditions": {"qps": {"enabled": true, "threshold": 0}}}),
            "conditions.qps.threshold",
        ),
        (
            json!({"enabled": false, "conditions": {"cpu_lower": {"enabled": true, "threshold": -1}}}),
            "conditions.cpu_lower.threshold",
        ),
        (
            json!({"enabled": false, "conditions": {"gpu_upper": {"enabled": true, "threshold": 100.01}}}),
            "conditions.gpu_upper.threshold",
        ),
        (
            json!({"enabled": false, "conditions": {"state_available": {"enabled": true, "threshold": 1}}}),
            "conditions.state_available.threshold",
        ),
        (
            json!({"enabled": false, "conditions": {"disk_upper": {"enabled": true}}}),
            "conditions.disk_upper",
        ),
    ];
    for (body, field) in bad {
        let (s, v) = server.put("/endpoints/quiet/alerts", body.clone()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {v}");
        assert_eq!(v["error"]["field"], field, "{body}: {v}");
    }
    // At the bounds: a percent of 0 and of 100, the smallest rate above 0.
    let (s, v) = server
        .put(
            "/endpoints/quiet/alerts",
            json!({"enabled": false, "conditions": {
                "cpu_lower": {"enabled": true, "threshold": 0},
                "cpu_upper": {"enabled": true, "threshold": 100},
                "qps": {"enabled": true, "threshold": 0.001}}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["conditions"]["cpu_upper"]["threshold"], 100.0);
    assert_eq!(server.get("/endpoints/quiet/alerts").await, v);
    let (s, _) = server
        .put("/endpoints/nowhere/alerts", json!({"enabled": false}))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = server
        .call(reqwest::Method::GET, "/endpoints/nowhere/metrics", None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // With `gateway.metrics` off, calls go through uncounted; instances are still read.
    server.deploy("quiet", custom("d1", json!({}))).await;
    server.available("quiet", "d1").await;
    let (s, _) = server.invoke("quiet", Some(&key), "/").await;
    assert_eq!(s, StatusCode::OK);
    eventually(
        Duration::from_secs(30),
        "the instance sampled once ready",
        async || {
            let m = server.get("/endpoints/quiet/metrics").await;
            assert_eq!(m["calls"]["requests"], 0, "{m}");
            let i = &m["deployments"][0]["instances"][0];
            // The sample may predate readiness by one interval.
            if i["memory_bytes"].as_u64().unwrap_or(0) > 0 && i["ready"] == true {
                Ok(())
            } else {
                Err(m)
            }
        },
    )
    .await;
}
