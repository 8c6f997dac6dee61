//! `/metrics` of the whole platform: each service's series moves when its thing happens,
//! and the process's own are there.

use std::time::Duration;

use crate::common::{
    Joiner, Server, cli, eventually_blocking, live_service, msg_client, msg_send, port0, serve,
};

/// The value of the series `name{labels}` (labels as Prometheus writes them, in order), if
/// the scrape has it.
fn value(scrape: &str, series: &str) -> Option<f64> {
    scrape.lines().find_map(|l| {
        let (name, v) = l.rsplit_once(' ')?;
        (name == series).then(|| v.parse().ok()).flatten()
    })
}

fn scrape(srv: &Server) -> String {
    reqwest::blocking::get(format!("{}/metrics", srv.admin))
        .unwrap()
        .text()
        .unwrap()
}

/// Waits until every series has the value `want` says.
fn until(srv: &Server, what: &str, want: &[(&str, &dyn Fn(f64) -> bool)]) {
    eventually_blocking(Duration::from_secs(20), what, || {
        let s = scrape(srv);
        match want
            .iter()
            .find(|(series, ok)| !value(&s, series).is_some_and(ok))
        {
            None => Ok(()),
            Some((series, _)) => Err(format!("{series} = {:?}", value(&s, series))),
        }
    });
}

#[test]
fn every_service_has_its_series_and_each_moves_when_its_thing_happens() {
    let dir = tempfile::tempdir().unwrap();
    let srv = serve(dir.path(), &port0(), &[("KEP_SIMULATOR_DELAY_MS", "10")]);
    let positive = |v: f64| v > 0.0;
    until(
        &srv,
        "the process's series and the gauges at zero",
        &[
            ("process_resident_memory_bytes", &positive),
            ("process_open_fds", &positive),
            ("process_cpu_seconds_total", &positive),
            ("kep_live_rooms", &|v| v == 0.0),
            ("kep_live_participants", &|v| v == 0.0),
            ("kep_messaging_queue_depth", &|v| v == 0.0),
            (r#"kep_adapter_drm_sessions{status="PENDING"}"#, &|v| {
                v == 0.0
            }),
        ],
    );

    // Live: a room with a participant and its stream, a Room call.
    let svc = live_service(&srv, "demo");
    let secret = svc["serviceSecret"].as_str().unwrap();
    let joiner = Joiner::start(
        &srv,
        &[
            "lobby",
            "--service-id",
            "demo",
            "--service-secret",
            secret,
            "--participant-id",
            "p1",
            "--publish",
        ],
    );
    joiner.next();
    cli(&srv, &["live", "rooms"]);
    until(
        &srv,
        "the live series",
        &[
            ("kep_live_rooms", &|v| v == 1.0),
            ("kep_live_participants", &|v| v == 1.0),
            ("kep_live_streams", &|v| v == 1.0),
            (
                r#"kep_live_rpc_calls_total{method="Room.ListRooms",result="ok"}"#,
                &|v| v == 1.0,
            ),
            // The first of provision's two steps is answered with its nonce, an error.
            (
                r#"kep_live_rpc_calls_total{method="Provision",result="ok"}"#,
                &|v| v == 1.0,
            ),
            (r#"kep_live_socket_messages_total{direction="in"}"#, &|v| {
                v >= 2.0
            }),
            (r#"kep_live_socket_messages_total{direction="out"}"#, &|v| {
                v >= 2.0
            }),
        ],
    );

    // Messaging: a token, a message accepted and delivered.
    msg_client(&srv, "m");
    let sent = msg_send(&srv, "m-1", "m");
    assert_eq!(sent["code"], "200");
    until(
        &srv,
        "the messaging series",
        &[
            ("kep_messaging_tokens_issued_total", &|v| v == 1.0),
            (r#"kep_messaging_accepted_total{channel="XMS"}"#, &|v| {
                v == 1.0
            }),
            (r#"kep_messaging_finished_total{status="200"}"#, &|v| {
                v == 1.0
            }),
            (
                r#"kep_messaging_handover_seconds_count{route="XMS"}"#,
                &|v| v == 1.0,
            ),
            ("kep_messaging_queue_depth", &|v| v == 0.0),
        ],
    );

    // Adapter: a DRM session waiting for its agent (none listens: it stays PENDING).
    let agent = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let org = cli(
        &srv,
        &[
            "adapter",
            "org",
            "create",
            "--method",
            "OAUTH2",
            "--agent",
            &agent.to_string(),
        ],
    );
    let org = org["id"].to_string();
    cli(
        &srv,
        &["adapter", "drm", "request", "--org", &org, "--file-id", "f"],
    );
    until(
        &srv,
        "the adapter series",
        &[(r#"kep_adapter_drm_sessions{status="PENDING"}"#, &|v| {
            v == 1.0
        })],
    );

    // Every series there is now, each of its kind, as Prometheus' own linter wants it.
    super::prometheus::promtool_check(&scrape(&srv));

    // `kep status` reads the same, as JSON and for a person.
    let status = cli(&srv, &["status", "--json"]);
    assert_eq!(status["live"]["services"], 1, "{status}");
    assert_eq!(status["live"]["participants"], 1, "{status}");
    assert_eq!(status["adapter"]["drm_sessions"]["PENDING"], 1, "{status}");
    assert_eq!(status["messaging"]["accepted"], 1, "{status}");
    assert_eq!(status["messaging"]["finished"]["200"], 1, "{status}");
    let text = std::process::Command::new(crate::common::KEP)
        .arg("status")
        .env("KEP_DATA_DIR", &srv.data_dir)
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("live       1 services, 1 rooms, 1 participants, 1 streams")
            && text.contains("messaging  1 accepted, 0 queued; final: 1 200"),
        "{text}"
    );
    drop(joiner);
}

#[test]
fn after_a_restart_the_message_totals_go_on_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let srv = serve(&data, &port0(), &[("KEP_SIMULATOR_DELAY_MS", "10")]);
    msg_client(&srv, "c");
    let uids: Vec<String> = (0..3)
        .map(|i| {
            msg_send(&srv, &format!("c-{i}"), "안녕")["uid"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    for uid in &uids {
        eventually_blocking(Duration::from_secs(20), "the message is final", || {
            let shown = cli(&srv, &["msg", "show", uid]);
            match shown["result"]["status_code"].as_str() {
                Some("API_200") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        });
    }
    let totals = |srv: &Server| {
        let status = cli(srv, &["status", "--json"]);
        let m = &status["messaging"];
        (
            m["accepted"].clone(),
            m["finished"].clone(),
            m["queued"].clone(),
        )
    };
    let before = eventually_blocking(Duration::from_secs(20), "the counters", || {
        let t = totals(&srv);
        if t.1["200"] == 3 {
            Ok(t)
        } else {
            Err(format!("{t:?}"))
        }
    });
    drop(srv);

    let srv = serve(&data, &port0(), &[]);
    let after = totals(&srv);
    assert_eq!(after, before, "the same totals after a restart");
    // Whole numbers print as integers, not `3.0`.
    assert_eq!(after.0.as_u64(), Some(3), "{after:?}");
    assert_eq!(after.1["200"].as_u64(), Some(3), "{after:?}");
    assert_eq!(after.1["510"].as_u64(), Some(0), "{after:?}");
    assert_eq!(after.2.as_u64(), Some(0), "{after:?}");
}
