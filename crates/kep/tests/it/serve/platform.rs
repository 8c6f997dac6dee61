//! What spans every service: the logs, the operator API's limits, the listeners' timeouts
//! and the documents.

use std::collections::HashMap;
use std::process::{Child, Command};
use std::time::Duration;

use serde_json::Value;

use crate::common::{KEP, Server, eventually, eventually_blocking, http, port0, serve};

/// Every kind of secret and token the services hand out or take, run through a server
/// logging every request (`KEP_LOG=debug`): none of them may appear in what it wrote.
#[test]
fn secrets_and_tokens_never_reach_the_logs() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("kep.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let operator = "operator-token-that-must-not-be-logged";
    // An HTTP carrier's gateway: hands over each send's dlr-url, answers its message id.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (dlr_urls, sent) = std::sync::mpsc::channel::<String>();
    let gateway = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let gateway_url = format!("http://{}/send", gateway.local_addr().unwrap());
    let send = move |axum::Form(form): axum::Form<HashMap<String, String>>| {
        let _ = dlr_urls.send(form["dlr-url"].clone());
        async { "Success \"gw-1\"" }
    };
    let app = axum::Router::new().route("/send", axum::routing::post(send));
    runtime.spawn(async move { axum::serve(gateway, app).await });
    let carrier_password = "carrier-password-that-must-not-be-logged";
    let config = dir.path().join("kep.toml");
    std::fs::write(
        &config,
        format!(
            "[[messaging.carriers]]\nname = \"gw\"\nkind = \"http\"\nurl = \"{gateway_url}\"\n\
             username = \"kep\"\npassword = \"{carrier_password}\"\n"
        ),
    )
    .unwrap();
    let mut child = Command::new(KEP)
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .args(port0())
        .arg("--config")
        .arg(&config)
        .env("KEP_LOG", "debug")
        .env("KEP_ADMIN_TOKEN", operator)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let _stop = KillOnDrop(&mut child);
    // Written whole (by a rename) once every listener is bound.
    let addresses = dir.path().join("addresses.json");
    let addrs: Value = eventually_blocking(Duration::from_secs(30), "kep serve starts", || {
        std::fs::read(&addresses).map(|b| serde_json::from_slice(&b).unwrap())
    });
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
    let mut secrets = vec![operator.to_owned(), carrier_password.to_owned()];
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
    // A wrong admin secret is refused, and the log says why (never the value).
    let wrong = "wrong-admin-secret-that-must-not-be-logged";
    keep(&serde_json::json!({ "wrong": wrong }), &["wrong"]);
    let refused = Command::new(KEP)
        .args(["live", "provision", "--service-id"])
        .arg(svc["serviceId"].as_str().unwrap())
        .args(["--admin-secret", wrong])
        .env("KEP_DATA_DIR", dir.path())
        .output()
        .unwrap();
    assert!(!refused.status.success());

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
    // A message through the HTTP carrier, and its receipt on the dlr-url's token.
    let sms = serde_json::json!({
        "cid": "c", "message_type": "SM", "phone_number": "821012345678", "message": "안녕",
        "sender_no": "0212345678",
    });
    let res = reqwest::blocking::Client::new()
        .post(format!("{}/v2/send/xms", url("messaging")))
        .bearer_auth(token["access_token"].as_str().unwrap())
        .json(&sms)
        .send()
        .unwrap();
    assert_eq!(res.status(), 200);
    let dlr_url = sent.recv_timeout(Duration::from_secs(30)).unwrap();
    let (_, dlr_token) = dlr_url.split_once("?token=").unwrap();
    // Its mac, the part that is secret (`<period>.<mac>`).
    let (_, mac) = dlr_token.split_once('.').unwrap();
    keep(&serde_json::json!({ "mac": mac }), &["mac"]);
    let res = reqwest::blocking::Client::new()
        .post(format!(
            "{}/carriers/gw/dlr?token={dlr_token}",
            url("messaging")
        ))
        .form(&[("id", "gw-1"), ("message_status", "DELIVRD")])
        .send()
        .unwrap();
    assert_eq!(res.status(), 200);

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
        "/carriers/gw/dlr",
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
    assert!(
        written.contains(r#"provision refused"#) && written.contains(r#"why="wrong value""#),
        "the refusal and why: {written}"
    );
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

/// The admin listener answers only to its own host names, against DNS rebinding: any IP
/// address, `localhost` and `admin.allowed_hosts`; another `Host` is 421 whatever the path,
/// before the token is looked at.
#[test]
fn the_admin_listener_refuses_a_host_name_not_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let srv = serve(
        dir.path(),
        &port0(),
        &[
            ("KEP_ADMIN_TOKEN", "op"),
            ("KEP_ADMIN_ALLOWED_HOSTS", "kep.example, Console.Example"),
        ],
    );
    let port = srv.admin.rsplit(':').next().unwrap();
    let client = reqwest::blocking::Client::new();
    let get = |path: &str, host: &str| {
        client
            .get(format!("{}{path}", srv.admin))
            .header("host", host)
            .bearer_auth("op")
            .send()
            .unwrap()
    };
    let paths = [
        "/metrics",
        "/docs",
        "/openapi/admin.json",
        "/admin/v1/live/services",
    ];
    for path in paths {
        for host in [
            format!("127.0.0.1:{port}"),
            format!("[::1]:{port}"),
            format!("localhost:{port}"),
            format!("kep.example:{port}"),
            "console.example".to_owned(),
        ] {
            assert_eq!(get(path, &host).status(), 200, "{path} to {host}");
        }
        for host in [
            "evil.example".to_owned(),
            format!("evil.example:{port}"),
            format!("kep.example.evil.example:{port}"),
        ] {
            let res = get(path, &host);
            assert_eq!(res.status(), 421, "{path} to {host}");
            let v: Value = res.json().unwrap();
            assert_eq!(v["error"]["code"], "misdirected_request", "{v}");
        }
    }
    // A request that names no host is no browser's.
    let addr = srv.admin.replace("http://", "");
    let (status, _) = raw_answer(&addr, b"GET /healthz HTTP/1.0\r\n\r\n");
    assert_eq!(status, 200);
}

/// An operator call whose body has not finished arriving, so it stays in flight until
/// released.
fn held_operator_call(srv: &Server) -> kep_testkit::Held {
    let call = reqwest::Client::new()
        .post(format!("{}/admin/v1/live/services", srv.admin))
        .bearer_auth("op")
        .header("content-type", "application/json");
    kep_testkit::held(call, b"{".to_vec(), b"}".to_vec())
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
    let refused = eventually(
        Duration::from_secs(30),
        "a second call in flight is refused",
        async || {
            // A call that came first took the one slot, and the held one was refused: hold
            // another, and call once it has had the pause to reach the server.
            if held.is_finished() {
                (held, release) = held_operator_call(&srv);
                return Err("the held call was refused; held another".to_owned());
            }
            match call() {
                answer @ (429, ..) => Ok(answer),
                (status, _, body) => Err(format!("{status} {body}")),
            }
        },
    )
    .await;
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

/// What a listener answers to a raw request: (status, body as JSON).
fn raw_answer(addr: &str, request: &[u8]) -> (u16, Value) {
    use std::io::{Read as _, Write as _};
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    tcp.write_all(request).unwrap();
    let mut answer = Vec::new();
    // The server may close with unread bytes (a reset) once it has answered.
    let _ = tcp.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn every_listener_refuses_what_it_cannot_route_in_its_apis_shape() {
    let dir = tempfile::tempdir().unwrap();
    let srv = serve(dir.path(), &port0(), &[("KEP_ADMIN_TOKEN", "op")]);
    // A head over the 64 KiB limit, and one that is no HTTP.
    let fat = format!(
        "GET / HTTP/1.1\r\nhost: x\r\n{}\r\n",
        "x-fat: 0123456789abcdef0123456789abcdef\r\n".repeat(2048)
    );
    let malformed = "GET / HTTP/1.1\r\nhost: x\r\nno colon here\r\n\r\n";
    for listener in ["admin", "live", "adapter", "messaging", "gateway"] {
        let addr = srv.url(listener).replace("http://", "");
        for (request, status) in [(fat.as_str(), 431), (malformed, 400)] {
            let (got, body) = raw_answer(&addr, request.as_bytes());
            assert_eq!(got, status, "{listener}: {body}");
            let shaped = match listener {
                "live" => body["jsonrpc"] == "2.0" && body["error"]["code"] == -32600,
                "adapter" => body["_code"] == status && body["_message"].is_string(),
                "messaging" => body["code"] == "410" && body["result"]["detail_code"] == "API_410",
                _ => body["error"]["code"].is_string() && body["error"]["message"].is_string(),
            };
            assert!(shaped, "{listener} {status}: {body}");
        }
    }

    // The authentication scheme is case-insensitive (RFC 9110 §11.1).
    let client = reqwest::blocking::Client::new();
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let res = client
            .get(format!("{}/admin/v1/live/services", srv.admin))
            .header("authorization", format!("{scheme} op"))
            .send()
            .unwrap();
        assert_eq!(res.status(), 200, "{scheme}");
    }
    let res = client
        .get(format!("{}/admin/v1/live/services", srv.admin))
        .header("authorization", "Bearerop")
        .send()
        .unwrap();
    assert_eq!(res.status(), 401);
}

/// Kills a child process when dropped, so a failed test leaves nothing running.
struct KillOnDrop<'a>(&'a mut Child);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Under `--log-format json` every line kep writes is JSON, the first start's operator
/// token line included (it goes to stdout, the logs to stderr); in text, no ANSI colour
/// reaches a stderr that is no terminal.
#[test]
fn json_logs_are_json_throughout_and_text_logs_to_a_pipe_are_plain() {
    for format in ["json", "text"] {
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new(KEP)
            .args(["serve", "--log-format", format, "--data-dir"])
            .arg(dir.path())
            .args(port0())
            .env("KEP_LOG", "debug")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let addresses = dir.path().join("addresses.json");
        eventually_blocking(Duration::from_secs(30), "kep serve starts", || {
            std::fs::metadata(&addresses).map(drop)
        });
        // A call, so that the logs hold more than the start.
        let addrs: Value = serde_json::from_slice(&std::fs::read(&addresses).unwrap()).unwrap();
        http(
            "GET",
            &format!("http://{}/healthz", addrs["admin"].as_str().unwrap()),
            None,
            None,
        );
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        );
        assert!(
            !stderr.contains('\x1b'),
            "{format}: no ANSI codes: {stderr}"
        );
        if format == "json" {
            for line in stdout
                .lines()
                .chain(stderr.lines())
                .filter(|l| !l.is_empty())
            {
                let v: Value =
                    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
                assert!(v.is_object(), "{line}");
            }
            let token = std::fs::read_to_string(dir.path().join("admin-token")).unwrap();
            let first: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
            assert_eq!(first["operator_token"], token.trim());
            // SQL statements are at trace, below the debug asked for.
            assert!(
                !stderr.contains("summary"),
                "no sqlx statement at debug: {stderr}"
            );
        }
    }
}

/// `kep completions bash` is a script bash loads, completing kep's commands.
#[test]
fn the_bash_completions_load_and_complete_the_commands() {
    let out = Command::new("bash")
        .args([
            "-c",
            r#"source <("$0" completions bash) && complete -p kep && COMP_WORDS=(kep ev) COMP_CWORD=1 && _kep kep ev kep && echo "${COMPREPLY[@]}""#,
            KEP,
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("complete") && stdout.lines().last() == Some("events"),
        "{stdout}"
    );
    for shell in ["zsh", "fish"] {
        let out = Command::new(KEP)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success() && out.stdout.len() > 1000, "{shell}");
    }
}
