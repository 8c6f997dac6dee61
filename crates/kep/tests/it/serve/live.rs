//! The live API through `kep serve` and the CLI: rooms, participants, SIGTERM and a restart.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::{Joiner, KEP, cli, eventually_blocking, http, live_service, port0, serve};

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

    // Operator → Provision → participants → Room commands, all from the CLI, watched by
    // `kep events` as they happen.
    let events = Joiner::command(&srv, &["events", "--service", "live"]);
    let svc = cli(&srv, &["live", "service", "create", "--id", "demo"]);
    assert_eq!(svc["serviceId"], "demo");
    let created = events.next();
    assert_eq!(
        (&created["event"], &created["object"], &created["service"]),
        (&"service.created".into(), &"demo".into(), &"live".into())
    );
    assert!(
        !created
            .to_string()
            .contains(svc["serviceSecret"].as_str().unwrap())
    );
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

    // A join token minted by the CLI, as a customer's server mints one, joins by itself.
    let minted = cli(
        &srv,
        &[
            "live",
            "token",
            "stage",
            "viewer",
            "--service-id",
            "demo",
            "--service-secret",
            &secret,
            "--no-publish",
            "--ttl",
            "10m",
        ],
    );
    let token = minted["token"].as_str().unwrap();
    let joiner = Joiner::start(&srv, &["--token", token, "--publish"]);
    let joined = joiner.next();
    assert_eq!(
        (joined["roomId"].as_str(), joined["participantId"].as_str()),
        (Some("stage"), Some("viewer"))
    );
    // `--no-publish`: its publish is refused, and it stays in the room.
    assert_eq!(joiner.next()["code"], -11002);
    cli(&srv, &["live", "destroy", "stage"]);
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
    let svc = live_service(&srv, "keep");
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
    let exit = eventually_blocking(
        Duration::from_secs(30),
        "kep serve stops on SIGTERM",
        || srv.child.try_wait().unwrap().ok_or("still running"),
    );
    assert!(exit.success(), "{exit}");
    for line in srv.logs().lines() {
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
