//! `GET /readyz` and `kep probe ready` (CONTRACT §0 "Running kep anywhere"): a container's
//! health check asks the CLI, which needs neither curl nor the operator token.

use std::process::Command;

use serde_json::json;

use crate::common::{KEP, http, port0, serve};

fn probe(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(KEP)
        .args(["probe", "ready"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_started_kep_is_ready_and_the_probe_says_so() {
    let dir = tempfile::tempdir().unwrap();
    // No operator token in the probe's environment: readiness needs none.
    let srv = serve(dir.path(), &port0(), &[("KEP_ADMIN_TOKEN", "op")]);
    let (status, body) = http("GET", &format!("{}/readyz", srv.admin), None, None);
    assert_eq!((status, body), (200, json!({"status": "ready"})));

    let data_dir = dir.path().to_str().unwrap();
    let (ok, stdout, stderr) = probe(&["--data-dir", data_dir]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "ready\n");
    let (ok, stdout, _) = probe(&["--admin-url", &srv.admin]);
    assert!(ok && stdout == "ready\n");

    // Both are in the operator document.
    let (_, doc) = http(
        "GET",
        &format!("{}/openapi/admin.json", srv.admin),
        None,
        None,
    );
    for path in ["/readyz", "/healthz"] {
        assert!(doc["paths"][path]["get"].is_object(), "{path}");
    }
}

#[test]
fn the_probe_fails_where_nothing_answers() {
    // A port bound and closed again: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (ok, _, stderr) = probe(&[
        "--admin-url",
        &format!("http://127.0.0.1:{port}"),
        "--timeout-s",
        "2",
    ]);
    assert!(!ok);
    assert!(
        stderr.starts_with("kep: not ready: no answer from http://127.0.0.1:"),
        "{stderr}"
    );
}
