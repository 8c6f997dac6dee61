//! Model serving through `kep serve` and the CLI: the flow, and instances a killed kep left.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::{
    KEP, Server, StopsGracefully, cli, cli_fails, eventually_blocking, http, port0, serve,
};

#[test]
fn the_serving_flow_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let srv = StopsGracefully(serve(dir.path(), &port0(), &[]));
    let srv = &srv.0;
    let instance = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kep-serving/tests/instance.py")
        .canonicalize()
        .unwrap();
    let instance = instance.to_str().unwrap();

    let image = cli(
        srv,
        &[
            "serving", "image", "create", "py", "--", "python3", instance,
        ],
    );
    assert_eq!(image["command"], serde_json::json!(["python3", instance]));
    let endpoint = cli(srv, &["serving", "endpoint", "create", "demo"]);
    let url = endpoint["url"].as_str().unwrap().to_owned();
    let key = endpoint["api_key"].as_str().unwrap().to_owned();
    let deployment = cli(
        srv,
        &[
            "serving",
            "deployment",
            "create",
            "demo",
            "blue",
            "--image",
            "py",
            "--env",
            "NAME=blue",
            "--readiness-http",
            "/ready",
            "--readiness-interval-s",
            "0.2",
        ],
    );
    assert_eq!(deployment["type"], "custom-image");
    assert_eq!(deployment["env"]["NAME"], "blue");
    assert_eq!(deployment["readiness"]["http"]["path"], "/ready");

    // `wait` shows its progress on stderr and the Available deployment on stdout.
    let out = Command::new(KEP)
        .args(["serving", "deployment", "wait", "demo", "blue"])
        .args(["--timeout-s", "60"])
        .env("KEP_DATA_DIR", &srv.data_dir)
        .output()
        .unwrap();
    let progress = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "deployment wait: {progress}");
    let waited: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(waited["state"], "Available");
    assert!(
        progress.contains("blue: Available, 1/1 ready"),
        "{progress}"
    );

    let (status, body) = http("GET", &format!("{url}/hello?x=1"), Some(&key), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["name"], "blue");
    assert_eq!(body["path"], "/hello?x=1");

    // A reissued key replaces the old one at once.
    let reissued = cli(srv, &["serving", "key", "reissue", "demo"]);
    let new_key = reissued["api_key"].as_str().unwrap();
    assert_ne!(new_key, key);
    assert_eq!(http("GET", &url, Some(&key), None).0, 401);
    assert_eq!(http("GET", &url, Some(new_key), None).0, 200);

    // A ratio with a part per deployment only; the server's reason reaches stderr.
    let err = cli_fails(srv, &["serving", "traffic", "demo", "--ratio", "1:0"]);
    assert!(err.contains("HTTP 400") && err.contains("ratio"), "{err}");
    let traffic = cli(srv, &["serving", "traffic", "demo"]);
    assert_eq!(traffic["percent"]["blue"], 100.0);

    // Alerts are set whole from the CLI; nothing was raised yet.
    let alerts = cli(
        srv,
        &[
            "serving",
            "alerts",
            "set",
            "demo",
            "--webhook",
            "http://127.0.0.1:9/hook",
            "--on",
            "qps=100",
            "--on",
            "status_5xx",
        ],
    );
    assert_eq!(alerts["enabled"], true);
    assert_eq!(alerts["conditions"]["qps"]["threshold"], 100.0);
    assert_eq!(alerts["conditions"]["cpu_upper"]["enabled"], false);
    assert_eq!(cli(srv, &["serving", "alerts", "show", "demo"]), alerts);
    let err = cli_fails(
        srv,
        &[
            "serving",
            "alerts",
            "set",
            "demo",
            "--webhook",
            "http://127.0.0.1:9/",
            "--on",
            "qps",
        ],
    );
    assert!(err.contains("conditions.qps.threshold"), "{err}");
    let history = cli(srv, &["serving", "alerts", "history", "demo"]);
    assert_eq!(history["alerts"], serde_json::json!([]));

    // The calls so far, in Prometheus' format on the admin listener (no token), in the
    // metrics API and in the monitor's view, once the monitor has sampled them.
    let scraped = eventually_blocking(Duration::from_secs(30), "the instances scraped", || {
        let text = reqwest::blocking::get(format!("{}/metrics", srv.admin))
            .unwrap()
            .text()
            .unwrap();
        if text.contains("kep_serving_instance_memory_bytes{endpoint=\"demo\"") {
            Ok(text)
        } else {
            Err(text)
        }
    });
    super::prometheus::promtool_check(&scraped);
    let ok_calls = scraped
        .lines()
        .find(|l| {
            l.starts_with("kep_serving_requests_total{")
                && l.contains("deployment=\"blue\"")
                && l.contains("status=\"2xx\"")
        })
        .unwrap_or_else(|| panic!("{scraped}"));
    assert_eq!(ok_calls.rsplit(' ').next(), Some("2"), "{ok_calls}");
    assert!(
        scraped.contains("kep_serving_request_duration_seconds_bucket{"),
        "{scraped}"
    );
    assert!(
        scraped.contains("status=\"4xx\"} 1"),
        "the old key's 401: {scraped}"
    );
    // The monitor samples once a second: wait for the sample that has all three calls.
    let metrics = eventually_blocking(Duration::from_secs(30), "a sample of all three", || {
        let metrics = cli(srv, &["serving", "metrics", "demo"]);
        if metrics["calls"]["requests"] == 3 {
            Ok(metrics)
        } else {
            Err(metrics)
        }
    });
    assert_eq!(metrics["calls"]["requests"], 3, "{metrics}");
    assert_eq!(metrics["deployments"][0]["instances"][0]["ready"], true);
    let out = Command::new(KEP)
        .args(["serving", "monitor", "demo", "--once"])
        .env("KEP_DATA_DIR", &srv.data_dir)
        .output()
        .unwrap();
    let view = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(view.starts_with("endpoint demo"), "{view}");
    assert!(view.contains("requests 3  2xx 2  4xx 1  5xx 0"), "{view}");
    assert!(view.contains("deployment blue  Available"), "{view}");

    // Every management route is in the operator API's OpenAPI document.
    let (_, doc) = http(
        "GET",
        &format!("{}/openapi/admin.json", srv.admin),
        None,
        None,
    );
    let endpoint = "/admin/v1/serving/endpoints/{endpoint}";
    let deployment = format!("{endpoint}/deployments/{{deployment}}");
    for (path, methods) in [
        ("/admin/v1/serving/images".to_owned(), &["get", "post"][..]),
        (
            "/admin/v1/serving/images/{name}".to_owned(),
            &["get", "delete"],
        ),
        (
            "/admin/v1/serving/images/{name}/archive".to_owned(),
            &["post"],
        ),
        ("/admin/v1/serving/models".to_owned(), &["get", "post"]),
        (
            "/admin/v1/serving/models/{name}".to_owned(),
            &["get", "delete"],
        ),
        ("/admin/v1/serving/endpoints".to_owned(), &["get", "post"]),
        (endpoint.to_owned(), &["get", "delete"]),
        (format!("{endpoint}/api-key"), &["post"]),
        (format!("{endpoint}/deployments"), &["get", "post"]),
        (deployment.clone(), &["get", "patch", "delete"]),
        (format!("{deployment}/events"), &["get"]),
        (
            format!("{deployment}/instances/{{instance}}/logs"),
            &["get"],
        ),
        (format!("{endpoint}/traffic"), &["get", "put"]),
        (format!("{endpoint}/mirroring"), &["get", "put"]),
        (format!("{endpoint}/alerts"), &["get", "put"]),
        (format!("{endpoint}/alerts/history"), &["get"]),
        (format!("{endpoint}/metrics"), &["get"]),
        ("/admin/v1/serving/quota".to_owned(), &["get"]),
    ] {
        for m in methods {
            assert!(
                doc["paths"][&path][*m].is_object(),
                "{m} {path} is described"
            );
        }
    }

    // Gone with its instances; the gateway tells no one whether an endpoint exists.
    cli(srv, &["serving", "endpoint", "delete", "demo"]);
    assert_eq!(
        cli(srv, &["serving", "endpoint", "list"]),
        serde_json::json!([])
    );
    assert_eq!(http("GET", &url, Some(new_key), None).0, 401);
}

/// An endpoint with one deployment of tests/instance.py (the image `py`), Available: the
/// endpoint as created (its API key shown) and the deployment as `wait` showed it.
fn python_deployment(srv: &Server, endpoint: &str, deployment: &str) -> (Value, Value) {
    let instance = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kep-serving/tests/instance.py")
        .canonicalize()
        .unwrap();
    let command = ["python3", instance.to_str().unwrap()];
    cli(
        srv,
        &[&["serving", "image", "create", "py", "--"][..], &command].concat(),
    );
    let created = cli(srv, &["serving", "endpoint", "create", endpoint]);
    let create = ["serving", "deployment", "create", endpoint, deployment];
    cli(srv, &[&create[..], &["--image", "py"]].concat());
    let waited = cli(
        srv,
        &["serving", "deployment", "wait", endpoint, deployment],
    );
    (created, waited)
}

/// Whether a process with this pid runs (a zombie counts as gone).
fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[test]
fn instances_left_by_a_killed_kep_are_reconciled_and_a_stop_stops_them() {
    let dir = tempfile::tempdir().unwrap();
    let first = serve(dir.path(), &port0(), &[]);
    let (endpoint, waited) = python_deployment(&first, "demo", "app");
    let key = endpoint["api_key"].as_str().unwrap().to_owned();
    let old_pid = waited["instances"][0]["pid"].as_u64().unwrap();
    drop(first); // SIGKILL: kep gets no chance to stop its instance.
    assert!(
        alive(old_pid),
        "the instance outlives a kep killed outright"
    );

    let second = StopsGracefully(serve(dir.path(), &port0(), &[]));
    let waited = cli(&second.0, &["serving", "deployment", "wait", "demo", "app"]);
    let new_pid = waited["instances"][0]["pid"].as_u64().unwrap();
    assert_ne!(new_pid, old_pid);
    assert!(!alive(old_pid), "the orphan was stopped at the next start");
    let url = cli(&second.0, &["serving", "endpoint", "show", "demo"])["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, body) = http("GET", &url, Some(&key), None);
    assert_eq!(
        (status, body["pid"].as_u64()),
        (200, Some(new_pid)),
        "the key survives the restart"
    );

    drop(second); // SIGTERM: kep stops its instances before it exits.
    assert!(!alive(new_pid), "a stopped kep leaves no instance behind");
}

/// kep's own stop and start take every deployment through Progressing and back: that is
/// no change of the deployment's, so it raises no state alert, and its history says what
/// caused it. A change of the user's still does.
#[test]
fn kep_own_stop_and_start_raise_no_state_alert() {
    let dir = tempfile::tempdir().unwrap();
    let first = StopsGracefully(serve(dir.path(), &port0(), &[]));
    let srv = &first.0;
    python_deployment(srv, "demo", "app");
    // Nothing listens on the webhook: an alert stays in the history as pending or failed.
    let alerts = [
        "serving",
        "alerts",
        "set",
        "demo",
        "--webhook",
        "http://127.0.0.1:9/hook",
        "--on",
        "state_progressing",
        "--on",
        "state_available",
    ];
    cli(srv, &alerts);
    drop(first);

    let second = StopsGracefully(serve(dir.path(), &port0(), &[]));
    let srv = &second.0;
    cli(srv, &["serving", "deployment", "wait", "demo", "app"]);
    let history = cli(srv, &["serving", "alerts", "history", "demo"]);
    assert_eq!(history["alerts"], serde_json::json!([]), "{history}");
    let events = cli(srv, &["serving", "deployment", "events", "demo", "app"]);
    let states: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "deployment_state")
        .collect();
    assert!(
        states.iter().any(|e| e["reason"] == "kep started"),
        "{events}"
    );
    // Leaving Available is only ever kep's stop (when it was recorded before the exit).
    assert!(
        states
            .iter()
            .filter(|e| e["from"] == "Available")
            .all(|e| e["reason"] == "kep is stopping"),
        "{events}"
    );

    // The user's own change: a rolling update, Available → Progressing → Available.
    cli(
        srv,
        &[
            "serving",
            "deployment",
            "patch",
            "demo",
            "app",
            "--env",
            "VERSION=2",
        ],
    );
    let raised = eventually_blocking(Duration::from_secs(30), "the state alerts", || {
        let history = cli(srv, &["serving", "alerts", "history", "demo"]);
        let conditions: Vec<String> = history["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| a["condition"].as_str().map(str::to_owned))
            .collect();
        if conditions.len() == 2 {
            Ok(conditions)
        } else {
            Err(format!("{history}"))
        }
    });
    assert_eq!(
        raised,
        ["state_available", "state_progressing"],
        "newest first"
    );
}
