//! Images in a real container engine (Podman's Docker-compatible API, `podman.rs`), made
//! locally and never pulled: by reference, from an uploaded archive, and with no engine.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::*;
use crate::podman::Podman;

const HTTPD: &str = "kep-test/httpd:1";

async fn on_engine(podman: &Podman, max_model_bytes: Option<u64>) -> Server {
    let socket = podman.socket_url();
    spawn(move |s, _| {
        s.container_socket = Some(socket);
        if let Some(max) = max_model_bytes {
            s.max_model_bytes = max;
        }
    })
    .await
}

/// `POST /images/{name}/archive` with `body` as it is.
async fn load(s: &Server, name: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let res = s
        .http
        .post(format!(
            "{}/admin/v1/serving/images/{name}/archive",
            s.admin
        ))
        .bearer_auth(OPERATOR_TOKEN)
        .header("content-type", "application/x-tar")
        .body(body)
        .send()
        .await
        .unwrap();
    (res.status(), res.json().await.unwrap())
}

fn refused(v: &Value, field: &str, says: &str) {
    assert_eq!(v["error"]["field"], field, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains(says), "{message}");
}

#[tokio::test]
async fn images_are_registered_by_reference_from_the_engines_store() {
    let podman = Podman::start();
    let id = podman.httpd_image(HTTPD);
    let size = podman.size(HTTPD);
    let s = on_engine(&podman, None).await;

    let (status, image) = s
        .post("/images", json!({"name": "httpd", "reference": HTTPD}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{image}");
    assert_eq!(image["reference"], HTTPD);
    assert_eq!(image["source"], "reference");
    assert_eq!(image["size_bytes"], size);
    assert!(
        image["image_id"].as_str().unwrap().ends_with(&id),
        "{image} {id}"
    );
    assert!(image.get("command").is_none(), "{image}");
    // By the engine's id too, as a digest.
    let (status, by_id) = s
        .post(
            "/images",
            json!({"name": "by-id", "reference": format!("sha256:{id}")}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{by_id}");
    assert_eq!(by_id["image_id"], image["image_id"]);

    let (status, v) = s
        .post(
            "/images",
            json!({"name": "nope", "reference": "kep-test/nope:1"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    refused(&v, "reference", "is not in the container engine's store");
    let (status, v) = s
        .post(
            "/images",
            json!({"name": "both", "reference": HTTPD, "command": "x"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    refused(&v, "reference", "not both");
    let (status, _) = s
        .post("/images", json!({"name": "httpd", "reference": HTTPD}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);

    // The command form is kept beside them.
    s.image("echo").await;
    let listed = s.get("/images").await;
    let names: Vec<_> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["name"])
        .collect();
    assert_eq!(names, ["by-id", "echo", "httpd"]);
    assert!(listed[1].get("source").is_none(), "{listed}");

    // Deleting the registration leaves the engine's image, which the user brought.
    assert_eq!(s.delete("/images/httpd").await, StatusCode::NO_CONTENT);
    podman.run(&["image", "exists", HTTPD]);

    // An image over serving.max_model_bytes is refused on its reference.
    let small = on_engine(&podman, Some(size - 1)).await;
    let (status, v) = small
        .post("/images", json!({"name": "httpd", "reference": HTTPD}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    refused(&v, "reference", "over serving.max_model_bytes");
    assert_eq!(small.get("/images").await, json!([]));
}

#[tokio::test]
async fn image_archives_are_streamed_to_the_engine_and_registered() {
    let podman = Podman::start();
    podman.httpd_image(HTTPD);
    let archive = tempfile::NamedTempFile::new().unwrap();
    podman.save(HTTPD, archive.path());
    // Loaded into an engine that does not have it.
    podman.run(&["rmi", HTTPD]);
    let bytes = std::fs::read(archive.path()).unwrap();
    let s = on_engine(&podman, None).await;

    let (status, image) = load(&s, "web", bytes.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{image}");
    assert_eq!(image["name"], "web");
    assert_eq!(image["source"], "archive");
    assert_eq!(image["reference"], format!("localhost/{HTTPD}"));
    assert_eq!(image["size_bytes"], podman.size(HTTPD));
    assert_eq!(s.get("/images/web").await, image);
    let (status, _) = load(&s, "web", bytes.clone()).await;
    assert_eq!(status, StatusCode::CONFLICT);

    let (status, v) = load(&s, "junk", b"not an image archive at all".repeat(100)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    refused(&v, "file", "not an image archive");
    let (status, v) = load(&s, "Bad_Name", bytes.clone()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(v["error"]["field"], "name");

    // Over serving.max_model_bytes: 413, nothing registered; by its length, or as it
    // arrives when it comes without one.
    let small = on_engine(&podman, Some(bytes.len() as u64 - 1)).await;
    let (status, v) = load(&small, "web", bytes.clone()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        bytes.chunks(64 * 1024).map(|c| Ok(c.to_vec())).collect();
    let res = small
        .http
        .post(format!(
            "{}/admin/v1/serving/images/web/archive",
            small.admin
        ))
        .bearer_auth(OPERATOR_TOKEN)
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(small.get("/images").await, json!([]));
    assert_eq!(
        s.get("/images").await.as_array().unwrap().len(),
        1,
        "only the archive that loaded"
    );
}

#[tokio::test]
async fn an_engine_that_is_not_running_is_a_503_naming_its_socket() {
    let dir = tempfile::tempdir().unwrap();
    // A socket file with nothing behind it, as a stopped engine leaves one.
    let socket = dir.path().join("podman.sock");
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let url = format!("unix://{}", socket.display());
    let s = spawn({
        let url = url.clone();
        move |s, _| s.container_socket = Some(url)
    })
    .await;

    let (status, v) = s
        .post("/images", json!({"name": "httpd", "reference": HTTPD}))
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert_eq!(v["error"]["code"], "engine_unavailable");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains(&url), "{message}");
    let (status, v) = load(&s, "httpd", b"x".repeat(1000)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert_eq!(s.get("/images").await, json!([]));

    // Images with a command need no engine.
    s.image("echo").await;
    assert_eq!(s.get("/images").await.as_array().unwrap().len(), 1);
}

/// What the container runtime will rely on: the fixture's engine runs the busybox image
/// serving HTTP on a port published on 127.0.0.1.
#[tokio::test]
async fn the_fixtures_engine_runs_the_httpd_image_on_a_published_port() {
    let podman = Podman::start();
    podman.httpd_image(HTTPD);
    podman.run(&[
        "run",
        "--detach",
        "--name",
        "web",
        "--publish",
        "127.0.0.1::8080",
        HTTPD,
    ]);
    let out = podman.run(&["port", "web", "8080"]);
    let addr = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let url = format!("http://{addr}/index.html");
    let body = eventually(Duration::from_secs(10), "httpd answers", async || {
        reqwest::get(&url).await?.error_for_status()?.text().await
    })
    .await;
    assert_eq!(body, crate::podman::HTTPD_INDEX);
}
