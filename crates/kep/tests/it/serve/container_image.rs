//! The container image (CONTRACT §0 "Container image"): the repository's `Containerfile`
//! built by Podman on a Debian base made with mmdebstrap (`./test` makes it, from Debian's
//! packages; `KEP_TEST_DEBIAN_BASE`), with the binary the tests run. It starts, turns
//! healthy through its `HEALTHCHECK`, runs as a user of its own, serves a provision and a
//! message send to the host, and keeps its data across a restart.

use std::time::Duration;

use super::images::podman::Podman;
use crate::common::{KEP, cli_with, eventually_blocking, free_port};

#[test]
fn the_image_serves_the_host_as_a_user_of_its_own_and_keeps_its_data() {
    let base = std::env::var("KEP_TEST_DEBIAN_BASE")
        .expect("KEP_TEST_DEBIAN_BASE: a Debian rootfs tarball (./test makes it with mmdebstrap)");
    let engine = Podman::start();
    engine.run(&["import", "--quiet", &base, "kep-test/debian:bookworm"]);
    let context = tempfile::tempdir().unwrap();
    std::fs::copy(KEP, context.path().join("kep")).unwrap();
    let containerfile = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Containerfile");
    let ctx = context.path().to_str().unwrap();
    engine.run(&[
        "build",
        "--quiet",
        "--pull=never",
        "--format",
        "docker",
        "--file",
        containerfile,
        "--build-arg",
        "BASE=kep-test/debian:bookworm",
        "--build-arg",
        "KEP_BIN=kep",
        "--tag",
        "kep-test/kep",
        ctx,
    ]);

    let ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let publish = |port: u16, inside: u16| format!("127.0.0.1:{port}:{inside}");
    let live_url = format!("http://127.0.0.1:{}", ports[1]);
    let run = |name: &str| {
        engine.run(&[
            "run",
            "--detach",
            "--name",
            name,
            "--publish",
            &publish(ports[0], 8800),
            "--publish",
            &publish(ports[1], 8801),
            "--publish",
            &publish(ports[2], 8803),
            "--volume",
            "kep-data:/var/lib/kep",
            "--env",
            "KEP_ADMIN_TOKEN=image-operator",
            "--env",
            &format!("KEP_LIVE_PUBLIC_URL={live_url}"),
            "kep-test/kep",
        ]);
    };
    let healthy = |name: &str| {
        eventually_blocking(
            Duration::from_secs(90),
            "the container turns healthy",
            || {
                let ran = engine
                    .command()
                    .args(["healthcheck", "run", name])
                    .output()
                    .unwrap();
                ran.status.success().then_some(()).ok_or("not healthy yet")
            },
        )
    };
    run("kep");
    healthy("kep");
    let uid = engine.run(&["exec", "kep", "id", "-u"]);
    assert_eq!(String::from_utf8_lossy(&uid.stdout).trim(), "10001");

    let cli_dir = tempfile::tempdir().unwrap();
    let env = [
        ("KEP_DATA_DIR", cli_dir.path().display().to_string()),
        ("KEP_ADMIN_URL", format!("http://127.0.0.1:{}", ports[0])),
        ("KEP_ADMIN_TOKEN", "image-operator".to_owned()),
        (
            "KEP_MESSAGING_URL",
            format!("http://127.0.0.1:{}", ports[2]),
        ),
    ];
    let svc = cli_with(&env, &["live", "service", "create", "--id", "boxed"]);
    let provisioned = cli_with(
        &env,
        &[
            "live",
            "provision",
            "--service-id",
            "boxed",
            "--admin-secret",
            svc["adminSecret"].as_str().unwrap(),
            "--live-url",
            &live_url,
        ],
    );
    assert_eq!(provisioned["api"], live_url.as_str());
    let client = cli_with(&env, &["msg", "client", "--name", "boxed"]);
    let (id, secret) = (
        client["client_id"].as_str().unwrap(),
        client["client_secret"].as_str().unwrap(),
    );
    cli_with(
        &env,
        &["msg", "token", "--client-id", id, "--client-secret", secret],
    );
    let sent = cli_with(
        &env,
        &[
            "msg",
            "send-xms",
            "--to",
            "821012345678",
            "--from",
            "0212345678",
            "--text",
            "boxed",
            "--cid",
            "c1",
        ],
    );
    assert_eq!(sent["code"], "200", "{sent}");
    assert!(sent["uid"].is_string(), "{sent}");

    // Stopped and started again on its volume: what it stored is there.
    engine.run(&["stop", "--time", "10", "kep"]);
    engine.run(&["rm", "kep"]);
    run("kep2");
    healthy("kep2");
    let services = cli_with(&env, &["live", "service", "list"]);
    assert_eq!(services, serde_json::json!(["boxed"]));
}
