//! Images in a real container engine through the CLI: by reference and from an archive,
//! listed with their sizes and sources. The engine is kep-serving's Podman fixture.

use crate::common::{StopsGracefully, cli, cli_fails, port0, serve};

#[path = "../../../../kep-serving/tests/it/podman.rs"]
mod podman;

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
