//! Messaging through `kep serve`: a real OAuth client, kill -9, the CLI's flow.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::{Server, cli, eventually_blocking, http, msg_client, msg_send, port0, serve};

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
    eventually_blocking(
        Duration::from_secs(30),
        "every message reaches a final status",
        || {
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
                Ok(())
            } else {
                Err(page)
            }
        },
    );
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
    let token = msg_client(&srv, "cli");
    assert_eq!(token["token_type"], "Bearer");
    let sent = msg_send(&srv, "cli-1", "안녕");
    assert_eq!(sent["code"], "200");
    let uid = sent["uid"].as_str().unwrap().to_owned();
    // The operator's view across clients: the hand-over, as JSON and as a table.
    eventually_blocking(Duration::from_secs(10), "the send in the outbox", || {
        let outbox = cli(&srv, &["msg", "outbox", "--json"]);
        match outbox
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["uid"] == uid.as_str())
        {
            Some(e) if e["route"] == "XMS" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let table = Command::new(crate::common::KEP)
        .args(["msg", "outbox"])
        .env("KEP_DATA_DIR", &srv.data_dir)
        .output()
        .unwrap();
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(table.starts_with("  at") && table.contains(&uid), "{table}");

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
    let body = serde_json::json!({
        "cid": "example-rcs-1", "message_type": "RCSSMS", "phone_number": "821012345678",
        "template_code": "T", "agency_id": "a", "ad_flag": "N", "sender_no": "0212345678",
        "fall_back_yn": false,
        "body": [{ "title": "Order shipped", "description": "Your order 1234 is on its way." }],
    });
    std::fs::write(&rcs, body.to_string()).unwrap();
    assert_eq!(
        cli(&srv, &["msg", "send-rcs", "--json", rcs.to_str().unwrap()])["code"],
        "200"
    );

    // Wait until everything is delivered, then read it back.
    eventually_blocking(Duration::from_secs(30), "both delivered", || {
        let page = cli(&srv, &["msg", "search"]);
        let results = page["results"].as_array().unwrap();
        if results.len() == 2 && results.iter().all(|r| r["status_code"] == "API_200") {
            Ok(())
        } else {
            Err(page)
        }
    });
    assert_eq!(
        cli(&srv, &["msg", "show", &uid])["result"]["message"],
        "안녕"
    );
    let results = cli(&srv, &["msg", "results"]);
    assert_eq!(results["results"][0]["cid"], "example-rcs-1");
    assert_eq!(
        cli(&srv, &["msg", "results"])["results"],
        serde_json::json!([]),
        "completed by the first call"
    );
    assert_eq!(cli(&srv, &["msg", "search", "--rcs"])["count"], 1);
}
