//! Declared resources (CONTRACT §0): `kep apply -f` (twice unchanged, a changed secret, a
//! refused file that applies nothing, `--prune`), `kep serve --init` before readiness, and
//! `kep serve --dev`'s fixed credentials, loopback only.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{KEP, Server, cli, eventually_blocking, port0, serve, serve_refused};

const DECLARED: &str = r#"
[[live.services]]
serviceId = "ci"
adminSecret = "ci-admin-secret"
serviceSecret = "ci-service-secret"
webhook = { url = "http://127.0.0.1:9/hook", secret = "ci-webhook-secret" }

[[adapter.org_login_types]]
id = 7
method = "OAUTH2"
adapter_agent = "127.0.0.1:9000"
secret_key = "ci-agent-secret"

[[messaging.clients]]
client_id = "ci"
client_secret = "ci-client-secret"
name = "CI"
"#;

fn apply(srv: &Server, file: &Path, extra: &[&str]) -> Output {
    Command::new(KEP)
        .args(["apply", "-f"])
        .arg(file)
        .args(extra)
        .env("KEP_DATA_DIR", &srv.data_dir)
        .output()
        .unwrap()
}

/// `kep apply`'s lines, which must have succeeded.
fn applied(srv: &Server, file: &Path, extra: &[&str]) -> Vec<String> {
    let out = apply(srv, file, extra);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `kep apply`'s refusal, which must have failed.
fn refused(srv: &Server, file: &Path) -> String {
    let out = apply(srv, file, &[]);
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stderr).unwrap()
}

/// Whether the messaging client gets a token with `secret`.
fn token_with(srv: &Server, id: &str, secret: &str) -> bool {
    Command::new(KEP)
        .args(["msg", "token", "--client-id", id, "--client-secret", secret])
        .env("KEP_DATA_DIR", &srv.data_dir)
        .output()
        .unwrap()
        .status
        .success()
}

/// Whether the live service provisions with `admin_secret`.
fn provisions(srv: &Server, id: &str, admin_secret: &str) -> bool {
    Command::new(KEP)
        .args([
            "live",
            "provision",
            "--service-id",
            id,
            "--admin-secret",
            admin_secret,
        ])
        .env("KEP_DATA_DIR", &srv.data_dir)
        .output()
        .unwrap()
        .status
        .success()
}

#[test]
fn apply_creates_changes_only_what_differs_and_a_refused_file_applies_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let srv = serve(dir.path(), &port0(), &[]);
    let file = dir.path().join("kep.toml");
    std::fs::write(&file, DECLARED).unwrap();
    assert_eq!(
        applied(&srv, &file, &[]),
        [
            "live.services ci: created",
            "adapter.org_login_types 7: created",
            "messaging.clients ci: created"
        ]
    );
    assert_eq!(
        applied(&srv, &file, &[]),
        [
            "live.services ci: unchanged",
            "adapter.org_login_types 7: unchanged",
            "messaging.clients ci: unchanged"
        ]
    );
    assert!(token_with(&srv, "ci", "ci-client-secret"));
    assert!(provisions(&srv, "ci", "ci-admin-secret"));
    let webhook = cli(&srv, &["live", "webhook", "show", "ci"]);
    assert_eq!(webhook["url"], "http://127.0.0.1:9/hook");

    // A new secret: that client changes, and its old secret stops working.
    std::fs::write(
        &file,
        DECLARED.replace("ci-client-secret", "ci-client-secret-2"),
    )
    .unwrap();
    assert_eq!(
        applied(&srv, &file, &[])[2],
        "messaging.clients ci: changed"
    );
    assert!(!token_with(&srv, "ci", "ci-client-secret"));
    assert!(token_with(&srv, "ci", "ci-client-secret-2"));

    // A field that may not change, beside a change that may: nothing of it is done.
    let forbidden = DECLARED
        .replace("ci-admin-secret", "ci-admin-secret-2")
        .replace("name = \"CI\"", "name = \"Renamed\"");
    std::fs::write(&file, forbidden).unwrap();
    let why = refused(&srv, &file);
    assert!(
        why.contains("messaging.clients ci: name: may not change"),
        "{why}"
    );
    assert!(why.contains("nothing applied"), "{why}");
    assert!(provisions(&srv, "ci", "ci-admin-secret"));

    // An unknown kind, a secret too short: refused naming them.
    std::fs::write(
        &file,
        DECLARED.replace("[[live.services]]", "[[live.servics]]"),
    )
    .unwrap();
    let why = refused(&srv, &file);
    assert!(
        why.contains("live.servics") || why.contains("unknown field `servics`"),
        "{why}"
    );
    std::fs::write(&file, DECLARED.replace("ci-agent-secret", "short")).unwrap();
    let why = refused(&srv, &file);
    assert!(
        why.contains("adapter.org_login_types 7: secret_key"),
        "{why}"
    );
    std::fs::write(&file, "[[serving.nothing]]\nx = 1\n").unwrap();
    assert!(refused(&srv, &file).contains("serving: not a section this server reads"));

    // --prune deletes the clients the file does not name, and nothing of other kinds.
    std::fs::write(
        &file,
        "[[messaging.clients]]\nclient_id = \"ci2\"\nclient_secret = \"ci2-client-secret\"\n",
    )
    .unwrap();
    assert_eq!(
        applied(&srv, &file, &["--prune"]),
        [
            "messaging.clients ci2: created",
            "messaging.clients ci: deleted"
        ]
    );
    assert!(!token_with(&srv, "ci", "ci-client-secret-2"));
    assert!(provisions(&srv, "ci", "ci-admin-secret"));
}

#[test]
fn an_init_file_is_applied_before_ready_and_a_refused_one_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("init.toml");
    std::fs::write(&file, DECLARED).unwrap();
    let args = [port0(), vec!["--init", file.to_str().unwrap()]].concat();
    let srv = serve(dir.path(), &args, &[]);
    eventually_blocking(std::time::Duration::from_secs(30), "ready", || {
        let ready = Command::new(KEP)
            .args(["probe", "ready"])
            .env("KEP_DATA_DIR", &srv.data_dir)
            .status()
            .unwrap();
        ready.success().then_some(()).ok_or("not yet")
    });
    assert!(
        srv.stdout.contains("messaging.clients ci: created")
            || token_with(&srv, "ci", "ci-client-secret")
    );
    assert_eq!(applied(&srv, &file, &[])[0], "live.services ci: unchanged");
    drop(srv);

    std::fs::write(&file, DECLARED.replace("ci-service-secret", "x")).unwrap();
    let other = tempfile::tempdir().unwrap();
    let err = serve_refused(other.path(), &args, &[]);
    assert!(err.contains("live.services ci: serviceSecret"), "{err}");
}

#[test]
fn dev_mode_serves_its_fixed_credentials_on_loopback_only() {
    let dir = tempfile::tempdir().unwrap();
    let args = [port0(), vec!["--dev"]].concat();
    let srv = serve(dir.path(), &args, &[]);
    eventually_blocking(
        std::time::Duration::from_secs(30),
        "dev credentials",
        || {
            token_with(&srv, "dev", "dev-client-secret")
                .then_some(())
                .ok_or("not yet")
        },
    );
    assert!(provisions(&srv, "dev", "dev-admin-secret"));
    let (status, orgs) = crate::common::http(
        "GET",
        &format!("{}/admin/v1/adapter/org-login-types", srv.admin),
        Some("dev-operator-token"),
        None,
    );
    assert_eq!((status, orgs[0]["id"].as_i64()), (200, Some(1)));
    drop(srv);

    // Without --dev the next start does not keep the dev token.
    let srv = serve(dir.path(), &port0(), &[]);
    let token = std::fs::read_to_string(dir.path().join("admin-token")).unwrap();
    assert_ne!(token.trim(), "dev-operator-token");
    drop(srv);

    let err = serve_refused(
        dir.path(),
        &[port0(), vec!["--dev", "--admin-addr", "0.0.0.0:0"]].concat(),
        &[],
    );
    assert!(
        err.contains("--dev: admin.addr is 0.0.0.0:0, not a loopback address"),
        "{err}"
    );
}
