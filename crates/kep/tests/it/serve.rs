//! The real `kep` binary: `kep serve` on port 0, driven by curl-like calls and by the CLI.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{KEP, Server, StopsGracefully, cli, http, port0, serve, wait_available};
use serde_json::Value;

/// A long-running CLI process (`kep live join`, `kep adapter agent`), read line by line.
struct Joiner {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Joiner {
    fn start(srv: &Server, args: &[&str]) -> Self {
        Self::command(srv, &[&["live", "join"], args].concat())
    }

    fn command(srv: &Server, args: &[&str]) -> Self {
        let mut child = Command::new(KEP)
            .args(args)
            .env("KEP_DATA_DIR", &srv.data_dir)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Joiner { child, lines }
    }

    fn next(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(30))
            .expect("a line from the CLI within 30 s");
        serde_json::from_str(&line).unwrap()
    }

    fn exits(mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "kep live join did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn serve_and_the_cli_run_the_live_api_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let srv = serve(dir.path(), &port0(), &[]);

    // The operator token is generated once, printed once, kept with mode 0600.
    let token = std::fs::read_to_string(dir.path().join("admin-token")).unwrap();
    assert!(
        srv.stdout.contains(&token),
        "printed at the first start: {:?}",
        srv.stdout
    );
    assert_eq!(
        http("GET", &format!("{}/healthz", srv.admin), None, None),
        (200, serde_json::json!({"status": "ok"}))
    );
    assert_eq!(
        http(
            "GET",
            &format!("{}/admin/v1/live/services", srv.admin),
            None,
            None
        )
        .0,
        401
    );
    let (status, doc) = http(
        "GET",
        &format!("{}/openapi/admin.json", srv.admin),
        None,
        None,
    );
    assert_eq!(status, 200);
    assert!(doc["paths"]["/admin/v1/live/services"]["post"].is_object());
    let (_, doc) = http(
        "GET",
        &format!("{}/openapi/live.json", srv.admin),
        None,
        None,
    );
    assert!(doc["paths"]["/api/rpc"]["post"].is_object());

    // Operator → Provision → participants → Room commands, all from the CLI.
    let svc = cli(&srv, &["live", "service", "create", "--id", "demo"]);
    assert_eq!(svc["serviceId"], "demo");
    let secret = svc["serviceSecret"].as_str().unwrap().to_owned();
    let provisioned = cli(
        &srv,
        &[
            "live",
            "provision",
            "--service-id",
            "demo",
            "--admin-secret",
            svc["adminSecret"].as_str().unwrap(),
        ],
    );
    assert_eq!(provisioned["api"].as_str().unwrap(), srv.live);

    let joiner = Joiner::start(
        &srv,
        &[
            "lobby",
            "--service-id",
            "demo",
            "--service-secret",
            &secret,
            "--participant-id",
            "p1",
            "--publish",
        ],
    );
    assert_eq!(joiner.next()["type"], "joined");
    assert_eq!(
        joiner.next(),
        serde_json::json!({"type": "published", "streamId": 1})
    );

    assert_eq!(cli(&srv, &["live", "rooms"]), serde_json::json!(["lobby"]));
    assert_eq!(
        cli(&srv, &["live", "participants", "lobby"]),
        serde_json::json!({"participants": [{"participantId": "p1", "streams": [{"streamId": 1}]}]})
    );
    cli(&srv, &["live", "inactivate", "lobby", "p1:1"]);
    let ev = joiner.next();
    assert_eq!(
        (ev["event"].as_str(), ev["streamId"].as_i64()),
        (Some("InactivatedStream"), Some(1))
    );
    cli(&srv, &["live", "kick", "lobby", "p1"]);
    assert_eq!(joiner.next()["event"], "Kicked");
    assert_eq!(joiner.next()["reason"], "kicked");
    joiner.exits();

    let joiner = Joiner::start(
        &srv,
        &["stage", "--service-id", "demo", "--service-secret", &secret],
    );
    assert_eq!(joiner.next()["type"], "joined");
    assert_eq!(
        cli(&srv, &["live", "destroy", "stage"]),
        serde_json::json!({"roomId": "stage"})
    );
    assert_eq!(joiner.next()["event"], "RoomDestroyed");
    joiner.exits();

    // A token from KEP_LIVE_TOKEN instead of the saved provision.
    let out = Command::new(KEP)
        .args(["live", "rooms", "--live-url", &srv.live])
        .env("KEP_LIVE_TOKEN", "forged")
        .env("KEP_DATA_DIR", dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("-11002"));
}

#[test]
fn sigterm_closes_participants_and_a_restart_keeps_services_and_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = serve(dir.path(), &port0(), &[("KEP_LOG_FORMAT", "json")]);
    let svc = cli(&srv, &["live", "service", "create", "--id", "keep"]);
    cli(
        &srv,
        &[
            "live",
            "provision",
            "--service-id",
            "keep",
            "--admin-secret",
            svc["adminSecret"].as_str().unwrap(),
        ],
    );
    let joiner = Joiner::start(
        &srv,
        &[
            "room",
            "--service-id",
            "keep",
            "--service-secret",
            svc["serviceSecret"].as_str().unwrap(),
        ],
    );
    assert_eq!(joiner.next()["type"], "joined");

    let status = Command::new("kill")
        .args(["-TERM", &srv.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let closed = joiner.next();
    assert_eq!(
        (closed["closed"].as_i64(), closed["reason"].as_str()),
        (Some(1001), Some("server shutting down"))
    );
    joiner.exits();
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(s) = srv.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "kep serve did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "{exit}");
    let mut logs = String::new();
    std::io::Read::read_to_string(srv.child.stderr.as_mut().unwrap(), &mut logs).unwrap();
    for line in logs.lines() {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|_| panic!("--log-format json: {line}"));
        assert!(v["level"].is_string());
    }

    // Restart on the same data dir: the operator token is not printed again, the service
    // and the provisioned token survive.
    let srv = serve(dir.path(), &port0(), &[]);
    assert!(!srv.stdout.contains("operator token"), "{}", srv.stdout);
    let out = Command::new(KEP)
        .args(["live", "rooms", "--live-url", &srv.live])
        .env("KEP_DATA_DIR", dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(cli(&srv, &["live", "service", "list"])[0], "keep");
}

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
fn the_adapter_round_trip_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let srv = serve(dir.path(), &port0(), &[]);
    let (status, doc) = http(
        "GET",
        &format!("{}/openapi/adapter.json", srv.admin),
        None,
        None,
    );
    assert_eq!(status, 200);
    assert!(doc["paths"]["/api/trust/drm/v0/uploadDecrypted"]["post"].is_object());

    let agent_addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let org = cli(
        &srv,
        &[
            "adapter",
            "org",
            "create",
            "--method",
            "OAUTH2",
            "--agent",
            &agent_addr,
        ],
    );
    let (id, key) = (
        org["id"].to_string(),
        org["secret_key"].as_str().unwrap().to_owned(),
    );
    assert_eq!(
        cli(&srv, &["adapter", "org", "show", &id])["adapter_agent"],
        agent_addr.as_str()
    );

    let released = dir.path().join("released.bin");
    let content: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(&released, &content).unwrap();
    let agent = Joiner::command(
        &srv,
        &[
            "adapter",
            "agent",
            "--listen",
            &agent_addr,
            "--org",
            &id,
            "--secret-key",
            &key,
            "--file",
            released.to_str().unwrap(),
        ],
    );
    assert_eq!(agent.next()["step"], "getOrgLoginType");

    let session = cli(
        &srv,
        &[
            "adapter",
            "drm",
            "request",
            "--org",
            &id,
            "--file-id",
            "report.pdf",
        ],
    );
    let session = session["session_id"].as_str().unwrap().to_owned();
    assert_eq!(agent.next()["notice"]["session_id"], session.as_str());
    assert_eq!(agent.next()["result"], "SUCCESS");
    assert_eq!(agent.next()["answer"]["Ok"]["_code"], 200);
    let shown = cli(&srv, &["adapter", "drm", "show", &session]);
    assert_eq!(shown["status"], "RELEASED");
    let out = dir.path().join("fetched.bin");
    let fetched = cli(
        &srv,
        &[
            "adapter",
            "drm",
            "fetch",
            &session,
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(fetched["size"], content.len());
    assert_eq!(std::fs::read(&out).unwrap(), content);
    let mut agent = agent;
    let _ = agent.child.kill();
    let _ = agent.child.wait();
}

/// Creates a messaging client through the operator API: (client_id, client_secret).
fn messaging_client(srv: &Server) -> (String, String) {
    let token = std::fs::read_to_string(srv.data_dir.join("admin-token")).unwrap();
    let (status, v) = http(
        "POST",
        &format!("{}/admin/v1/messaging/clients", srv.admin),
        Some(token.trim()),
        Some("{}"),
    );
    assert_eq!(status, 201);
    (
        v["client_id"].as_str().unwrap().to_owned(),
        v["client_secret"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn a_real_oauth_client_gets_a_token_and_sends() {
    let dir = tempfile::tempdir().unwrap();
    let srv = serve(dir.path(), &port0(), &[("KEP_SIMULATOR_DELAY_MS", "10")]);
    let (id, secret) = messaging_client(&srv);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/oauth_client.py");
    let out = Command::new("python3")
        .args([script, &srv.url("messaging"), &id, &secret])
        // oauthlib refuses plain http unless told the transport is local.
        .env("OAUTHLIB_INSECURE_TRANSPORT", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "requests-oauthlib client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["token"]["token_type"], "Bearer");
    assert_eq!(v["token"]["expires_in"], 21600);
    assert_eq!(v["send_status"], 200);
    assert_eq!(v["send"]["code"], "200");
}

#[test]
fn accepted_messages_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    // A carrier so slow that nothing finishes before the kill.
    let slow = [
        ("KEP_SIMULATOR_DELAY_MS", "60000"),
        ("KEP_MESSAGING_DISPATCH_LEASE_S", "1"),
    ];
    let mut srv = serve(dir.path(), &port0(), &slow);
    let (id, secret) = messaging_client(&srv);
    let url = srv.url("messaging");
    let client = reqwest::blocking::Client::new();
    let token: Value = client
        .post(format!("{url}/v2/oauth/token"))
        .basic_auth(&id, Some(&secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .unwrap()
        .json()
        .unwrap();
    let token = token["access_token"].as_str().unwrap().to_owned();
    let mut uids = Vec::new();
    for i in 0..20 {
        let body = serde_json::json!({"cid": format!("k-{i}"), "message_type": "SM", "phone_number": format!("8210123400{:02}", i + 10),
            "message": "survive", "sender_no": "0212345678"});
        let v: Value = client
            .post(format!("{url}/v2/send/xms"))
            .bearer_auth(&token)
            .json(&body)
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(v["code"], "200", "{i}: {v}");
        uids.push(v["uid"].as_str().unwrap().to_owned());
    }
    srv.child.kill().unwrap(); // SIGKILL
    srv.child.wait().unwrap();

    let srv = serve(
        dir.path(),
        &port0(),
        &[
            ("KEP_SIMULATOR_DELAY_MS", "10"),
            ("KEP_MESSAGING_DISPATCH_LEASE_S", "1"),
        ],
    );
    let url = srv.url("messaging");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page: Value = client
            .post(format!("{url}/v2/info/message/search"))
            .bearer_auth(&token)
            .json(&serde_json::json!({"size": 1000}))
            .send()
            .unwrap()
            .json()
            .unwrap();
        let results = page["results"].as_array().unwrap();
        assert_eq!(results.len(), 20, "every accepted message is still there");
        if results.iter().all(|r| r["status_code"] == "API_200") {
            let got: Vec<_> = results
                .iter()
                .map(|r| r["uid"].as_str().unwrap().to_owned())
                .collect();
            assert_eq!(got, uids);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every message reached a final status: {page}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Each left for the carrier exactly once.
    let op = std::fs::read_to_string(dir.path().join("admin-token")).unwrap();
    let (_, outbox) = http(
        "GET",
        &format!("{}/admin/v1/messaging/outbox?limit=1000", srv.admin),
        Some(op.trim()),
        None,
    );
    assert_eq!(outbox.as_array().unwrap().len(), 20);
}

#[test]
fn the_messaging_flow_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let srv = serve(dir.path(), &port0(), &[("KEP_SIMULATOR_DELAY_MS", "5")]);
    let (status, doc) = http(
        "GET",
        &format!("{}/openapi/messaging.json", srv.admin),
        None,
        None,
    );
    assert_eq!(status, 200);
    for path in [
        "/v2/oauth/token",
        "/v2/send/xms",
        "/v2/send/rcs",
        "/v2/upload/rcs",
        "/v2/info/rcs/results",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} is described");
    }
    let (_, admin_doc) = http(
        "GET",
        &format!("{}/openapi/admin.json", srv.admin),
        None,
        None,
    );
    for path in [
        "/admin/v1/messaging/clients",
        "/admin/v1/adapter/org-login-types",
        "/admin/v1/live/services",
    ] {
        assert!(admin_doc["paths"][path].is_object(), "{path} is described");
    }
    let client = cli(&srv, &["msg", "client", "--name", "cli"]);
    let token = cli(
        &srv,
        &[
            "msg",
            "token",
            "--client-id",
            client["client_id"].as_str().unwrap(),
            "--client-secret",
            client["client_secret"].as_str().unwrap(),
        ],
    );
    assert_eq!(token["token_type"], "Bearer");
    let sent = cli(
        &srv,
        &[
            "msg",
            "send-xms",
            "--to",
            "821012345678",
            "--from",
            "0212345678",
            "--text",
            "안녕",
            "--cid",
            "cli-1",
        ],
    );
    assert_eq!(sent["code"], "200");
    let uid = sent["uid"].as_str().unwrap().to_owned();

    let jpeg = dir.path().join("a.jpg");
    let mut bytes = vec![0xFF, 0xD8, 0xFF, 0xE0];
    bytes.resize(5000, 7);
    std::fs::write(&jpeg, &bytes).unwrap();
    let group = cli(&srv, &["msg", "upload-mms", jpeg.to_str().unwrap()]);
    let mm = cli(
        &srv,
        &[
            "msg",
            "send-xms",
            "--type",
            "MM",
            "--to",
            "821012345678",
            "--from",
            "0212345678",
            "--text",
            "사진",
            "--title",
            "제목",
            "--content-group-id",
            group["content_group_id"].as_str().unwrap(),
        ],
    );
    assert_eq!(mm["code"], "200");

    let rcs = dir.path().join("rcs.json");
    std::fs::write(
        &rcs,
        serde_json::json!({"cid": "cli-rcs", "message_type": "RCSSMS", "phone_number": "821012345678", "template_code": "T",
            "agency_id": "a", "ad_flag": "N", "sender_no": "0212345678", "fall_back_yn": false,
            "body": [{"title": "t", "description": "d"}]})
        .to_string(),
    )
    .unwrap();
    assert_eq!(
        cli(&srv, &["msg", "send-rcs", "--json", rcs.to_str().unwrap()])["code"],
        "200"
    );

    // Wait until everything is delivered, then read it back.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let page = cli(&srv, &["msg", "search"]);
        let results = page["results"].as_array().unwrap();
        if results.len() == 2 && results.iter().all(|r| r["status_code"] == "API_200") {
            break;
        }
        assert!(Instant::now() < deadline, "{page}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        cli(&srv, &["msg", "show", &uid])["result"]["message"],
        "안녕"
    );
    let results = cli(&srv, &["msg", "results"]);
    assert_eq!(results["results"][0]["cid"], "cli-rcs");
    assert_eq!(
        cli(&srv, &["msg", "results"])["results"],
        serde_json::json!([]),
        "completed by the first call"
    );
    assert_eq!(cli(&srv, &["msg", "search", "--rcs"])["count"], 1);
}

/// Runs a CLI command expected to fail; its stderr.
fn cli_fails(srv: &Server, args: &[&str]) -> String {
    let out = Command::new(KEP)
        .args(args)
        .env("KEP_DATA_DIR", &srv.data_dir)
        .output()
        .unwrap();
    assert!(!out.status.success(), "kep {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

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
    let deadline = Instant::now() + Duration::from_secs(20);
    let scraped = loop {
        let text = reqwest::blocking::get(format!("{}/metrics", srv.admin))
            .unwrap()
            .text()
            .unwrap();
        if text.contains("kep_serving_instance_memory_bytes{endpoint=\"demo\"") {
            break text;
        }
        assert!(Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(200));
    };
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
    let deadline = Instant::now() + Duration::from_secs(15);
    let metrics = loop {
        let metrics = cli(srv, &["serving", "metrics", "demo"]);
        if metrics["calls"]["requests"] == 3 || Instant::now() > deadline {
            break metrics;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
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
    let instance = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kep-serving/tests/instance.py")
        .canonicalize()
        .unwrap();
    let first = serve(dir.path(), &port0(), &[]);
    cli(
        &first,
        &[
            "serving",
            "image",
            "create",
            "py",
            "--",
            "python3",
            instance.to_str().unwrap(),
        ],
    );
    let key = cli(&first, &["serving", "endpoint", "create", "demo"])["api_key"]
        .as_str()
        .unwrap()
        .to_owned();
    cli(
        &first,
        &[
            "serving",
            "deployment",
            "create",
            "demo",
            "app",
            "--image",
            "py",
        ],
    );
    let waited = cli(&first, &["serving", "deployment", "wait", "demo", "app"]);
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

/// The model-server tests' folder: its test models' maker and its serving script.
fn model_server_tests() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../kep-model-server/tests")
}

/// Runs a command that must succeed.
fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The test models (`make_models.py`, with the `onnx` package) in a folder of their own.
fn made_models() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    run(Command::new("python3")
        .arg(model_server_tests().join("make_models.py"))
        .arg(dir.path()));
    dir
}

/// A model registered once, served by kep's own model server over TF Serving REST and
/// KServe v2, called through the gateway: both answer alike.
#[test]
fn models_are_served_over_tf_serving_and_kserve_through_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let models = made_models();
    let srv = StopsGracefully(serve(dir.path(), &port0(), &[]));
    let srv = &srv.0;
    let mlp = models.path().join("mlp.onnx");
    let mlp = mlp.to_str().unwrap();

    // The signature is read from the artifact at upload.
    let m = upload_model(srv, "mlp", mlp, "pytorch");
    assert_eq!(
        m["inputs"],
        serde_json::json!([{"name": "x", "datatype": "FP32", "shape": [-1, 4]}])
    );
    assert_eq!(m["outputs"][0]["shape"], serde_json::json!([-1, 3]));
    upload_model(srv, "mlp-tf", mlp, "tensorflow");
    // What the engine cannot run is refused with the reason, before any deployment.
    let unsupported = models.path().join("unsupported.onnx");
    let err = cli_fails(
        srv,
        &[
            "serving",
            "model",
            "upload",
            "odd",
            unsupported.to_str().unwrap(),
            "--framework",
            "pytorch",
        ],
    );
    assert!(
        err.contains("HTTP 400") && err.contains("Frobnicate"),
        "{err}"
    );

    let mut keys = std::collections::HashMap::new();
    for (endpoint, deployment, kind, model) in [
        ("tri", "d1", "triton", "mlp"),
        ("tfs", "d1", "tensorflow-serving", "mlp-tf"),
    ] {
        let e = cli(srv, &["serving", "endpoint", "create", endpoint]);
        let url = e["url"].as_str().unwrap().to_owned();
        keys.insert(endpoint, (url, e["api_key"].as_str().unwrap().to_owned()));
        cli(
            srv,
            &[
                "serving",
                "deployment",
                "create",
                endpoint,
                deployment,
                "--type",
                kind,
                "--model",
                model,
            ],
        );
        wait_available(srv, endpoint, deployment);
    }
    let rows = serde_json::json!([[1.0, 2.0, 3.0, 4.0], [0.5, 0.1, -1.0, 2.0]]);
    let (status, kserve) = http(
        "POST",
        &format!("{}/v2/models/mlp/infer", keys["tri"].0),
        Some(&keys["tri"].1),
        Some(
            &serde_json::json!({"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32",
                                            "data": rows}]})
            .to_string(),
        ),
    );
    assert_eq!(status, 200, "{kserve}");
    assert_eq!(kserve["outputs"][0]["shape"], serde_json::json!([2, 3]));
    let (status, tf) = http(
        "POST",
        &format!("{}/v1/models/mlp-tf:predict", keys["tfs"].0),
        Some(&keys["tfs"].1),
        Some(&serde_json::json!({"instances": rows}).to_string()),
    );
    assert_eq!(status, 200, "{tf}");
    let flat: Vec<f64> = tf["predictions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()))
        .collect();
    let data: Vec<f64> = kserve["outputs"][0]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(flat.len(), 6);
    assert!(
        flat.iter().zip(&data).all(|(a, b)| (a - b).abs() < 1e-6),
        "{tf} {kserve}"
    );
    // Each row of probabilities sums to 1.
    assert!((data[..3].iter().sum::<f64>() - 1.0).abs() < 1e-5);

    // The real tritonclient, through the gateway: the endpoint URL as its base path, the
    // key as a header, binary tensors (its default) both ways.
    let client = r#"
import json, sys, numpy as np, tritonclient.http as http
url, key = sys.argv[1], sys.argv[2]
client = http.InferenceServerClient(url.removeprefix("http://"))
auth = {"Authorization": f"Bearer {key}"}
assert client.is_model_ready("mlp", headers=auth)
x = http.InferInput("x", [2, 4], "FP32")
x.set_data_from_numpy(np.array([[1, 2, 3, 4], [0.5, 0.1, -1, 2]], np.float32))
probs = client.infer("mlp", [x], headers=auth).as_numpy("probs")
print(json.dumps([float(p) for p in probs.ravel()]))
"#;
    let out = Command::new("python3")
        .args(["-c", client, &keys["tri"].0, &keys["tri"].1])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let got: Vec<f64> = serde_json::from_str(said.trim()).unwrap();
    assert!(
        got.iter().zip(&data).all(|(a, b)| (a - b).abs() < 1e-6),
        "{said}"
    );
}

/// Uploads a model file with the CLI; answers the registered model.
fn upload_model(srv: &Server, name: &str, file: impl AsRef<Path>, framework: &str) -> Value {
    let file = file.as_ref().to_str().unwrap();
    cli(
        srv,
        &[
            "serving",
            "model",
            "upload",
            name,
            file,
            "--framework",
            framework,
        ],
    )
}

/// The ONNX Runtime engine, chosen per deployment (`KEP_ENGINE`) or for all
/// (`serving.engine`), loaded from the onnxruntime wheel's library: it serves a model the
/// built-in engine cannot run, and a deployment that names no engine or a wrong one is
/// refused when it is made.
#[test]
fn a_deployment_may_run_its_model_in_onnx_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let models = made_models();
    let first = StopsGracefully(serve(dir.path(), &port0(), &[]));
    let srv = &first.0;
    // `Det` is not in tract: the signature is read by ONNX Runtime at upload.
    let det = models.path().join("ort_only.onnx");
    let m = upload_model(srv, "det", &det, "pytorch");
    assert_eq!(m["inputs"][0]["shape"], serde_json::json!([-1, 3, 3]));
    let e = cli(srv, &["serving", "endpoint", "create", "det"]);
    let (url, key) = (e["url"].as_str().unwrap(), e["api_key"].as_str().unwrap());
    fn create<'a>(env: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![
            "serving",
            "deployment",
            "create",
            "det",
            "d1",
            "--type",
            "triton",
            "--model",
            "det",
        ];
        for e in env {
            args.extend(["--env", e]);
        }
        args
    }
    for (env, field, said) in [
        (&[][..], "model", "Det"),
        (&["KEP_ENGINE=tract"][..], "model", "Det"),
        (
            &["KEP_ENGINE=tensorrt"][..],
            "env",
            "is not tract, onnxruntime or native",
        ),
        (
            &["KEP_ENGINE=native"][..],
            "env",
            "no tritonserver on kep's PATH",
        ),
    ] {
        let err = cli_fails(srv, &create(env));
        assert!(
            err.contains("HTTP 400") && err.contains(field) && err.contains(said),
            "{env:?}: {err}"
        );
    }
    cli(srv, &create(&["KEP_ENGINE=onnxruntime"]));
    wait_available(srv, "det", "d1");
    let matrices = serde_json::json!([
        [[2, 0, 0], [0, 3, 0], [0, 0, 4]],
        [[1, 2, 3], [4, 5, 6], [7, 8, 10]]
    ]);
    let (status, v) = http(
        "POST",
        &format!("{url}/v2/models/det/infer"),
        Some(key),
        Some(
            &serde_json::json!({"inputs": [{"name": "x", "shape": [2, 3, 3],
                                            "datatype": "FP32", "data": matrices}]})
            .to_string(),
        ),
    );
    assert_eq!(status, 200, "{v}");
    let got: Vec<f64> = v["outputs"][0]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert!(
        (got[0] - 24.0).abs() < 1e-4 && (got[1] + 3.0).abs() < 1e-4,
        "{v}"
    );
    drop(first);

    // For every deployment: `serving.engine`, with the library named by its setting.
    let lib = Command::new("python3")
        .args([
            "-c",
            "import onnxruntime, os, glob; d = os.path.dirname(onnxruntime.__file__); \
             print(glob.glob(os.path.join(d, 'capi', 'libonnxruntime.so*'))[0])",
        ])
        .output()
        .unwrap();
    let lib = String::from_utf8(lib.stdout).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let srv = StopsGracefully(serve(
        dir.path(),
        &port0(),
        &[
            ("KEP_SERVING_ENGINE", "onnxruntime"),
            ("KEP_SERVING_ONNXRUNTIME", lib.trim()),
        ],
    ));
    let srv = &srv.0;
    upload_model(srv, "det", &det, "pytorch");
    cli(srv, &["serving", "endpoint", "create", "det"]);
    cli(srv, &create(&[]));
    wait_available(srv, "det", "d1");
}

/// `KEP_ENGINE=native` runs the type's real server from the PATH on the model laid out for
/// it: a Triton repository (ONNX or GraphDef, with its config.pbtxt) and a TF Serving
/// SavedModel made from a frozen GraphDef. Neither server can be installed here, so
/// `native_server.py` stands in for both: it takes their command lines, checks the layout
/// as they read it, and serves with `kep model-server`.
#[test]
fn a_real_model_server_on_the_path_may_serve_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let models = made_models();
    let bin = models.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/native_server.py");
    for program in ["tritonserver", "tensorflow_model_server"] {
        let script = bin.join(program);
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nexec python3 {} {KEP} {program} \"$@\"\n",
                fake.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let srv = StopsGracefully(serve(dir.path(), &port0(), &[("PATH", &path)]));
    let srv = &srv.0;
    let upload = |name: &str, file: &str, framework: &str| {
        let file = models.path().join(file);
        upload_model(srv, name, file, framework)
    };
    upload("mlp", "mlp.onnx", "pytorch");
    let frozen = upload("mlp-tf", "mlp.pb", "tensorflow");
    assert_eq!(frozen["inputs"][0]["shape"], serde_json::json!([-1, 4]));
    upload("mlp-onnx-tf", "mlp.onnx", "tensorflow");
    // A frozen GraphDef is a TensorFlow model's form; a PyTorch model comes as ONNX.
    let err = cli_fails(
        srv,
        &[
            "serving",
            "model",
            "upload",
            "mlp-pt",
            models.path().join("mlp.pb").to_str().unwrap(),
            "--framework",
            "pytorch",
        ],
    );
    assert!(
        err.contains("HTTP 400") && err.contains("frozen GraphDef is for tensorflow"),
        "{err}"
    );
    let deploy = |endpoint: &str, kind: &str, model: &str| {
        let e = cli(srv, &["serving", "endpoint", "create", endpoint]);
        let args = [
            "serving",
            "deployment",
            "create",
            endpoint,
            "d1",
            "--type",
            kind,
            "--model",
            model,
            "--env",
            "KEP_ENGINE=native",
        ];
        (
            e,
            Command::new(KEP)
                .args(args)
                .env("KEP_DATA_DIR", &srv.data_dir)
                .output()
                .unwrap(),
        )
    };
    let rows = serde_json::json!([[1.0, 2.0, 3.0, 4.0], [0.5, 0.1, -1.0, 2.0]]);
    let mut answers = Vec::new();
    for (endpoint, kind, model) in [
        ("tri", "triton", "mlp"),
        ("tri-tf", "triton", "mlp-tf"),
        ("tfs", "tensorflow-serving", "mlp-tf"),
    ] {
        let (e, out) = deploy(endpoint, kind, model);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        wait_available(srv, endpoint, "d1");
        let (url, key) = (e["url"].as_str().unwrap(), e["api_key"].as_str().unwrap());
        let (status, v) = if kind == "triton" {
            http(
                "POST",
                &format!("{url}/v2/models/{model}/infer"),
                Some(key),
                Some(
                    &serde_json::json!({"inputs": [{"name": "x", "shape": [2, 4],
                                                    "datatype": "FP32", "data": rows}]})
                    .to_string(),
                ),
            )
        } else {
            http(
                "POST",
                &format!("{url}/v1/models/{model}:predict"),
                Some(key),
                Some(&serde_json::json!({"instances": rows}).to_string()),
            )
        };
        assert_eq!(status, 200, "{endpoint}: {v}");
        // Flat: KServe's data, or TF Serving's rows one after another.
        let data: Vec<f64> = if kind == "triton" {
            v["outputs"][0]["data"].as_array().unwrap().clone()
        } else {
            v["predictions"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|r| r.as_array().unwrap().clone())
                .collect()
        }
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
        answers.push(data);
    }
    // The ONNX model and its frozen-graph twin agree, whichever server runs them.
    for other in &answers[1..] {
        assert!(
            other.len() == 6
                && other
                    .iter()
                    .zip(&answers[0])
                    .all(|(a, b)| (a - b).abs() < 1e-5),
            "{answers:?}"
        );
    }
    // TF Serving serves TensorFlow graphs only, and Cosmos has no native server.
    let (_, out) = deploy("tfs-onnx", "tensorflow-serving", "mlp-onnx-tf");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("HTTP 400") && err.contains("this model is ONNX"),
        "{err}"
    );
}

/// A Cosmos deployment: the model with a serving script around it, given as text or as a
/// git repository cloned at deploy time, called through the gateway.
#[test]
fn a_cosmos_script_inline_or_from_a_repository_serves_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let work = made_models();
    let tests = model_server_tests();
    // A repository holding the script, as a user's would.
    let repo = work.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    std::fs::copy(tests.join("serve.rhai"), repo.join("serve.rhai")).unwrap();
    for args in [
        &["init", "-q"][..],
        &["add", "serve.rhai"],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "commit",
            "-qm",
            "script",
        ],
    ] {
        run(Command::new("git").args(args).current_dir(&repo));
    }
    let srv = StopsGracefully(serve(dir.path(), &port0(), &[]));
    let srv = &srv.0;
    let mlp = work.path().join("mlp.onnx");
    upload_model(srv, "mlp", mlp, "pytorch");
    let e = cli(srv, &["serving", "endpoint", "create", "cos"]);
    let (url, key) = (e["url"].as_str().unwrap(), e["api_key"].as_str().unwrap());
    let script_file = tests.join("serve.rhai");
    let repo_url = format!("file://{}", repo.display());
    fn create<'a>(name: &'a str, flag: &'a str, value: &'a str) -> Vec<&'a str> {
        let kind = ["--type", "cosmos", "--model", "mlp"];
        [
            &["serving", "deployment", "create", "cos", name][..],
            &kind,
            &[flag, value],
        ]
        .concat()
    }
    // A script that does not compile, or a repository that cannot be cloned, is refused
    // when the deployment is made.
    for (name, script, why) in [
        ("bad", "fn preprocess(r) { r }", "postprocess"),
        ("gone", "file:///nowhere/at/all", "git clone"),
    ] {
        let err = cli_fails(srv, &create(name, "--script", script));
        assert!(err.contains("HTTP 400") && err.contains(why), "{err}");
    }
    for (name, flag, value) in [
        ("inline", "--script-file", script_file.to_str().unwrap()),
        ("repo", "--script", repo_url.as_str()),
    ] {
        cli(srv, &create(name, flag, value));
        wait_available(srv, "cos", name);
    }
    // Both deployments answer: the second gets no traffic until the split says so.
    cli(
        srv,
        &[
            "serving",
            "traffic",
            "cos",
            "--weights",
            "inline=50,repo=50",
        ],
    );
    let body = r#"{"features": [[1, 2, 3, 4]], "names": ["a", "b", "c"]}"#;
    for _ in 0..4 {
        let (status, v) = http("POST", &format!("{url}/predict"), Some(key), Some(body));
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["labels"].as_array().unwrap().len(), 1, "{v}");
    }
    let (status, v) = http("POST", &format!("{url}/predict"), Some(key), Some("{}"));
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("no features"), "{v}");
}

/// Every kind of secret and token the services hand out or take, run through a server
/// logging every request (`KEP_LOG=debug`): none of them may appear in what it wrote.
#[test]
fn secrets_and_tokens_never_reach_the_logs() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("kep.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let operator = "operator-token-that-must-not-be-logged";
    let mut child = Command::new(KEP)
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .args(port0())
        .env("KEP_LOG", "debug")
        .env("KEP_ADMIN_TOKEN", operator)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let _stop = KillOnDrop(&mut child);
    let addresses = dir.path().join("addresses.json");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !addresses.exists() {
        assert!(Instant::now() < deadline, "kep serve did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    let addrs: Value = serde_json::from_slice(&std::fs::read(&addresses).unwrap()).unwrap();
    let url = |listener: &str| format!("http://{}", addrs[listener].as_str().unwrap());
    let admin = |path: &str, body: &str| {
        let (status, v) = http(
            "POST",
            &format!("{}{path}", url("admin")),
            Some(operator),
            Some(body),
        );
        assert!(status < 300, "{path}: {status} {v}");
        v
    };
    let mut secrets = vec![operator.to_owned()];
    let mut keep = |v: &Value, fields: &[&str]| {
        for f in fields {
            secrets.push(v[*f].as_str().unwrap().to_owned());
        }
    };

    // Live: the service's secrets, then a provisioned room token used on a room call.
    let svc = admin("/admin/v1/live/services", "{}");
    keep(&svc, &["serviceSecret", "adminSecret"]);
    let out = Command::new(KEP)
        .args([
            "live",
            "provision",
            "--service-id",
            svc["serviceId"].as_str().unwrap(),
            "--admin-secret",
            svc["adminSecret"].as_str().unwrap(),
        ])
        .env("KEP_DATA_DIR", dir.path())
        .output()
        .unwrap();
    let provisioned: Value = serde_json::from_slice(&out.stdout).unwrap();
    keep(&provisioned, &["token"]);
    let rooms = reqwest::blocking::Client::new()
        .post(format!("{}/api/rpc", url("live")))
        .bearer_auth(provisioned["token"].as_str().unwrap())
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc": "2.0", "id": 1, "method": "Room.ListRooms", "params": {}}"#)
        .send()
        .unwrap();
    let rooms: Value = rooms.json().unwrap();
    assert_eq!(rooms["result"], serde_json::json!([]), "{rooms}");

    // Adapter: an org's secret key on an agent call.
    let org = admin(
        "/admin/v1/adapter/org-login-types",
        r#"{"method": "OAUTH2", "adapter_agent": "127.0.0.1:9"}"#,
    );
    keep(&org, &["secret_key"]);
    let res = reqwest::blocking::Client::new()
        .get(format!(
            "{}/api/trust/login/v0/getOrgLoginType",
            url("adapter")
        ))
        .header(
            "Authorization",
            format!("Secret {}", org["secret_key"].as_str().unwrap()),
        )
        .header("Kep-OrgLoginType", format!("ID {}", org["id"]))
        .send()
        .unwrap();
    assert_eq!(res.status(), 200);

    // Messaging: client credentials for a token, the token on a search.
    let client = admin("/admin/v1/messaging/clients", "{}");
    keep(&client, &["client_secret"]);
    let token: Value = reqwest::blocking::Client::new()
        .post(format!("{}/v2/oauth/token", url("messaging")))
        .basic_auth(
            client["client_id"].as_str().unwrap(),
            client["client_secret"].as_str(),
        )
        .form(&[("grant_type", "client_credentials")])
        .send()
        .unwrap()
        .json()
        .unwrap();
    keep(&token, &["access_token"]);
    let res = reqwest::blocking::Client::new()
        .post(format!("{}/v2/info/message/search", url("messaging")))
        .bearer_auth(token["access_token"].as_str().unwrap())
        .json(&serde_json::json!({}))
        .send()
        .unwrap();
    assert_ne!(res.status(), 401);

    // Serving: an endpoint's key on a call, and its reissue.
    let endpoint = admin("/admin/v1/serving/endpoints", r#"{"name": "quiet"}"#);
    keep(&endpoint, &["api_key"]);
    let (status, _) = http(
        "GET",
        &format!("{}/v1/models/m", endpoint["url"].as_str().unwrap()),
        endpoint["api_key"].as_str(),
        None,
    );
    assert_eq!(status, 503, "no deployment yet");
    let reissued = admin("/admin/v1/serving/endpoints/quiet/api-key", "{}");
    keep(&reissued, &["api_key"]);

    drop(_stop);
    let written = std::fs::read_to_string(&log_path).unwrap();
    // The requests were logged, so the check below has something to look at.
    for path in [
        "/admin/v1/live/services",
        "/api/rpc",
        "/v2/oauth/token",
        "/endpoints/quiet",
    ] {
        assert!(
            written.contains(path),
            "{path} is not in the log:\n{written}"
        );
    }
    for secret in &secrets {
        assert!(
            !written.contains(secret.as_str()),
            "a secret reached the log: {secret}\n{written}"
        );
    }
}

/// An operator call with `token`: (status, `Retry-After`, body).
fn operator_call(
    srv: &Server,
    token: &str,
    body: reqwest::blocking::Body,
) -> (u16, Option<u64>, Value) {
    let res = reqwest::blocking::Client::new()
        .post(format!("{}/admin/v1/live/services", srv.admin))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .unwrap();
    let retry_after = res
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    (
        res.status().as_u16(),
        retry_after,
        res.json().unwrap_or(Value::Null),
    )
}

/// A 429 in the operator shape, with `Retry-After`.
fn assert_limited((status, retry_after, body): &(u16, Option<u64>, Value)) {
    assert_eq!(*status, 429, "{body}");
    assert_eq!(body["error"]["code"], "too_many_requests", "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");
    assert!(retry_after.is_some_and(|s| s >= 1), "{retry_after:?}");
}

#[test]
fn the_operator_api_is_limited_and_a_wrong_token_spends_only_its_peers_budget() {
    let dir = tempfile::tempdir().unwrap();
    // A burst of 3, then one call an hour: nothing refills while the test runs.
    let srv = serve(
        dir.path(),
        &port0(),
        &[
            ("KEP_ADMIN_TOKEN", "op"),
            ("KEP_ADMIN_RATE_LIMIT_PER_S", "0.0003"),
            ("KEP_ADMIN_RATE_LIMIT_BURST", "3"),
        ],
    );
    // A wrong token counts against the caller's address: 3 refusals, then 429.
    for _ in 0..3 {
        assert_eq!(operator_call(&srv, "wrong", "{}".into()).0, 401);
    }
    assert_limited(&operator_call(&srv, "wrong", "{}".into()));
    // The operator's budget is whole: 3 calls pass, the fourth is refused.
    for _ in 0..3 {
        let (status, _, body) = operator_call(&srv, "op", "{}".into());
        assert_eq!(status, 201, "{body}");
    }
    assert_limited(&operator_call(&srv, "op", "{}".into()));
    // What is not the operator API is not limited.
    assert_eq!(
        http("GET", &format!("{}/healthz", srv.admin), None, None).0,
        200
    );
}

/// An operator call whose body has not finished arriving, so it stays in flight until
/// released.
fn held_operator_call(srv: &Server) -> kep_client::Held {
    let call = reqwest::Client::new()
        .post(format!("{}/admin/v1/live/services", srv.admin))
        .bearer_auth("op")
        .header("content-type", "application/json");
    kep_client::held(call, b"{".to_vec(), b"}".to_vec())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_operator_may_have_only_so_many_calls_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let srv = serve(
        dir.path(),
        &port0(),
        &[
            ("KEP_ADMIN_TOKEN", "op"),
            ("KEP_ADMIN_CONCURRENCY_LIMIT", "1"),
        ],
    );
    // The blocking client of the other tests, off the runtime's own threads.
    let call = || tokio::task::block_in_place(|| operator_call(&srv, "op", "{}".into()));
    let (mut held, mut release) = held_operator_call(&srv);
    // Once the server has it, another call is refused.
    let mut refused = None;
    for _ in 0..600 {
        // A call that came first took the one slot, and the held one was refused.
        if held.is_finished() {
            (held, release) = held_operator_call(&srv);
        }
        let answer = call();
        if answer.0 == 429 {
            refused = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = refused.expect("a second call in flight is refused");
    assert_limited(&refused);
    release.send(()).unwrap();
    assert_eq!(held.await.unwrap().unwrap().status(), 201);
    assert_eq!(call().0, 201);
}

#[test]
fn every_listener_closes_a_connection_that_sends_no_request_in_time() {
    use std::io::{Read as _, Write as _};
    let dir = tempfile::tempdir().unwrap();
    let listeners = ["admin", "live", "adapter", "messaging", "gateway"];
    let env: Vec<(String, &str)> = listeners
        .iter()
        .map(|l| {
            (
                format!("KEP_{}_HEADER_READ_TIMEOUT_S", l.to_uppercase()),
                "1",
            )
        })
        .collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let srv = serve(dir.path(), &port0(), &env);
    let addresses: Value =
        serde_json::from_slice(&std::fs::read(srv.data_dir.join("addresses.json")).unwrap())
            .unwrap();
    for listener in listeners {
        let addr = addresses[listener].as_str().unwrap();
        // Half a request head, then nothing more (slowloris).
        let mut tcp = std::net::TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
            .unwrap();
        let mut rest = Vec::new();
        // A reset also ends the connection; a read that times out fails the test.
        if let Err(e) = tcp.read_to_end(&mut rest) {
            assert_ne!(
                e.kind(),
                std::io::ErrorKind::WouldBlock,
                "{listener}: still open"
            );
            assert_ne!(
                e.kind(),
                std::io::ErrorKind::TimedOut,
                "{listener}: still open"
            );
        }
        // A complete request on a new connection is answered.
        let mut tcp = std::net::TcpStream::connect(addr).unwrap();
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        tcp.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 "), "{listener}: {answer}");
    }
}

/// Kills a child process when dropped, so a failed test leaves nothing running.
struct KillOnDrop<'a>(&'a mut Child);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What schema fuzzing (fuzz/schema.sh) met that the documents did not say: the operator
/// API's 401 on every call and 400/413/415 on every JSON body, the message calls' 401 and
/// their error bodies, the RCS results' POST, a JSON-RPC `id` of `null` and a Provision
/// without a token, the adapter's header values.
#[test]
fn the_documents_describe_every_answer_the_schema_fuzzing_met() {
    let dir = tempfile::tempdir().unwrap();
    let srv = serve(dir.path(), &port0(), &[]);
    let doc = |name: &str| {
        let (status, doc) = http(
            "GET",
            &format!("{}/openapi/{name}.json", srv.admin),
            None,
            None,
        );
        assert_eq!(status, 200, "{name}");
        doc
    };
    let operations = |doc: &Value| -> Vec<(String, String, Value)> {
        let mut ops = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                ops.push((path.clone(), method.clone(), op.clone()));
            }
        }
        ops
    };

    let admin = doc("admin");
    let ops = operations(&admin);
    assert!(ops.len() >= 40, "{} operator calls", ops.len());
    for (path, method, op) in &ops {
        let answers = &op["responses"];
        assert!(answers["401"].is_object(), "{method} {path}: 401");
        if op["requestBody"]["content"]["application/json"].is_object() {
            for status in ["400", "413", "415"] {
                assert!(answers[status].is_object(), "{method} {path}: {status}");
            }
        }
        if op["parameters"].as_array().is_some_and(|p| !p.is_empty()) {
            assert!(answers["400"].is_object(), "{method} {path}: 400");
        }
    }

    let messaging = doc("messaging");
    for (path, method, op) in operations(&messaging) {
        if path == "/v2/oauth/token" {
            continue;
        }
        let unauthorized = &op["responses"]["401"];
        assert!(
            unauthorized["content"]["application/json"]["schema"].is_object(),
            "{method} {path}: 401 and its body"
        );
    }
    assert!(messaging["paths"]["/v2/info/rcs/results"]["post"].is_object());

    let live = doc("live");
    let rpc = &live["paths"]["/api/rpc"]["post"];
    assert!(
        rpc["security"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!({})),
        "Provision needs no token: {}",
        rpc["security"]
    );
    let id_types = &live["components"]["schemas"]["RpcResponse"]["properties"]["id"]["type"];
    assert!(
        id_types
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("null")),
        "{id_types}"
    );

    // Every call of every document may be over its listener's limits: 429, with
    // `Retry-After` and the call's refusal shape.
    for (name, doc) in [
        ("admin", &admin),
        ("live", &live),
        ("messaging", &messaging),
        ("adapter", &doc("adapter")),
    ] {
        for (path, method, op) in operations(doc) {
            let limited = &op["responses"]["429"];
            assert!(
                limited["headers"]["Retry-After"].is_object(),
                "{name}: {method} {path}: 429 and Retry-After"
            );
            assert!(
                limited["content"]["application/json"]["schema"]["$ref"].is_string(),
                "{name}: {method} {path}: 429's body"
            );
        }
    }

    let adapter = doc("adapter");
    let upload = &adapter["paths"]["/api/trust/drm/v0/uploadResult"]["post"];
    let file_type = upload["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "Kep-File-Type")
        .unwrap();
    assert_eq!(file_type["schema"]["$ref"], "#/components/schemas/FileType");
    let decrypted = &adapter["paths"]["/api/trust/drm/v0/uploadDecrypted"]["post"];
    assert_eq!(
        decrypted["requestBody"]["content"]["multipart/form-data"]["schema"]["$ref"],
        "#/components/schemas/ReleasedFileForm"
    );
    assert_eq!(
        adapter["components"]["schemas"]["ReleasedFileForm"]["required"],
        serde_json::json!(["file"])
    );
}
