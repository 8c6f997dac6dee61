//! The real `kep` binary: `kep serve` on port 0, driven by curl-like calls and by the CLI.

mod adapter;
mod batching;
mod browser;
mod carriers;
mod container_image;
mod data_dir;
mod declared;
mod documents;
mod every_instance;
mod first_hour;
mod frameworks;
mod gpus;
mod grpc;
mod https;
mod images;
mod live;
mod messaging;
mod metrics;
mod models;
mod platform;
mod prometheus;
mod readiness;
mod serving;
mod tls;
mod webhooks;

use std::process::Command;

use serde_json::Value;

use crate::common::{KEP, http, serve};

#[test]
fn settings_come_from_flags_then_env_then_toml() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kep.toml");
    std::fs::write(
        &config,
        "[live]\ntoken_ttl_s = 42\naddr = \"127.0.0.1:1\"\n[admin]\naddr = \"127.0.0.1:0\"\n[adapter]\naddr = \"127.0.0.1:0\"\n[messaging]\naddr = \"127.0.0.1:0\"\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let srv = serve(
        &data,
        &["--config", config.to_str().unwrap()],
        &[
            ("KEP_LIVE_ADDR", "127.0.0.1:0"),
            ("KEP_LIVE_MEDIA_ADDR", "127.0.0.1:0"),
            ("KEP_ADMIN_TOKEN", "from-env"),
        ],
    );
    assert!(
        !data.join("admin-token").exists(),
        "KEP_ADMIN_TOKEN is used as it is"
    );
    let (status, svc) = http(
        "POST",
        &format!("{}/admin/v1/live/services", srv.admin),
        Some("from-env"),
        Some("{}"),
    );
    assert_eq!(status, 201);
    let out = Command::new(KEP)
        .args([
            "live",
            "provision",
            "--service-id",
            svc["serviceId"].as_str().unwrap(),
            "--admin-secret",
            svc["adminSecret"].as_str().unwrap(),
        ])
        .env("KEP_DATA_DIR", &data)
        .output()
        .unwrap();
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["ttl"], 42, "from the TOML file");

    // --only with an unknown service is refused.
    let out = Command::new(KEP)
        .args(["serve", "--only", "nope", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown service"));
}

#[test]
fn a_cli_error_is_one_line_and_exit_code_1_even_with_backtraces_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    // No server has ever run in this data dir: there is nothing to call.
    let out = Command::new(KEP)
        .args(["serving", "image", "list"])
        .env("KEP_DATA_DIR", dir.path())
        .env("RUST_BACKTRACE", "1")
        .env("RUST_LIB_BACKTRACE", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("kep: "), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");
}
