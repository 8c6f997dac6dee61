//! Images in a real container engine through the CLI: by reference and from an archive,
//! listed with their sizes and sources, and run as containers that a restarted kep
//! removes. The engine is kep-serving's Podman fixture.

use crate::common::{StopsGracefully, cli, cli_fails, port0, serve, wait_available};

#[path = "../../../../kep-serving/tests/it/podman.rs"]
pub(super) mod podman;

#[test]
fn engine_images_are_created_by_reference_and_archive_and_listed() {
    let engine = podman::Podman::start();
    engine.httpd_image("kep-test/httpd:1");
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("httpd.tar");
    engine.save("kep-test/httpd:1", &archive);
    engine.run(&["rmi", "kep-test/httpd:1"]);
    engine.httpd_image("kep-test/httpd:2");
    let socket = engine.socket_url();
    let srv = StopsGracefully(serve(
        &dir.path().join("data"),
        &port0(),
        &[("KEP_SERVING_CONTAINER_SOCKET", &socket)],
    ));
    let srv = &srv.0;

    let by_reference = cli(
        srv,
        &[
            "serving",
            "image",
            "create",
            "two",
            "--reference",
            "kep-test/httpd:2",
        ],
    );
    assert_eq!(by_reference["source"], "reference", "{by_reference}");
    let loaded = cli(
        srv,
        &[
            "serving",
            "image",
            "create",
            "one",
            "--archive",
            archive.to_str().unwrap(),
        ],
    );
    assert_eq!(
        loaded["reference"], "localhost/kep-test/httpd:1",
        "{loaded}"
    );
    cli(
        srv,
        &["serving", "image", "create", "cmd", "--command", "true"],
    );
    let err = cli_fails(
        srv,
        &[
            "serving",
            "image",
            "create",
            "gone",
            "--reference",
            "kep-test/httpd:9",
        ],
    );
    assert!(err.contains("not in the container engine's store"), "{err}");

    let listed = cli(srv, &["serving", "image", "list"]);
    let seen: Vec<_> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["name"].clone(),
                i["source"].clone(),
                i["size_bytes"].clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                "cmd".into(),
                serde_json::Value::Null,
                serde_json::Value::Null
            ),
            // Sizes as the engine reports them; a loaded copy's differs from its source's.
            (
                "one".into(),
                "archive".into(),
                engine.size("kep-test/httpd:1").into()
            ),
            (
                "two".into(),
                "reference".into(),
                engine.size("kep-test/httpd:2").into()
            ),
        ]
    );
}

/// A kep killed outright leaves its containers running; the next kep on the same data dir
/// removes those (and only those: another owner's stays) before it starts the deployment
/// afresh, and a kep stopped with SIGTERM removes its own.
#[test]
fn containers_left_by_a_killed_kep_are_removed_at_its_next_start_and_no_others() {
    let engine = podman::Podman::start();
    engine.httpd_image("kep-test/httpd:1");
    engine.run(&[
        "create",
        "--label",
        "io.kep.owner=/another/kep",
        "kep-test/httpd:1",
    ]);
    let foreign = engine.containers("io.kep.owner=/another/kep");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let socket = engine.socket_url();
    let env = [("KEP_SERVING_CONTAINER_SOCKET", socket.as_str())];
    let first = serve(&data, &port0(), &env);
    cli(
        &first,
        &[
            "serving",
            "image",
            "create",
            "httpd",
            "--reference",
            "kep-test/httpd:1",
        ],
    );
    let created = cli(&first, &["serving", "endpoint", "create", "demo"]);
    let key = created["api_key"].as_str().unwrap().to_owned();
    cli(
        &first,
        &[
            "serving",
            "deployment",
            "create",
            "demo",
            "app",
            "--image",
            "httpd",
        ],
    );
    wait_available(&first, "demo", "app");
    let owner = format!("io.kep.owner={}", data.canonicalize().unwrap().display());
    let old = engine.containers(&owner);
    assert_eq!(old.len(), 1, "{old:?}");
    drop(first); // SIGKILL: kep gets no chance to remove its container.
    assert_eq!(engine.containers(&owner), old, "the container outlives kep");

    let second = StopsGracefully(serve(&data, &port0(), &env));
    wait_available(&second.0, "demo", "app");
    let new = engine.containers(&owner);
    assert_eq!(new.len(), 1, "{new:?}");
    assert_ne!(new, old, "the old container was removed, a new one made");
    assert_eq!(engine.containers("io.kep.owner=/another/kep"), foreign);
    let url = cli(&second.0, &["serving", "endpoint", "show", "demo"])["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let page = reqwest::blocking::Client::new()
        .get(format!("{url}/"))
        .bearer_auth(&key)
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert_eq!(page, podman::HTTPD_INDEX);

    drop(second); // SIGTERM: kep removes its containers before it exits.
    assert!(engine.containers(&owner).is_empty());
    assert_eq!(engine.containers("io.kep.owner=/another/kep"), foreign);
}
