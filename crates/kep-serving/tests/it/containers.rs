//! Custom-image deployments of engine images run as containers (Podman's Docker-compatible
//! API, `podman.rs`): served through the gateway, restarted when killed, split between two
//! images, kept out of rotation when nothing listens, backed off when they exit at once,
//! and removed with their deployment.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::*;
use crate::podman::{HTTPD_INDEX, Podman};

async fn on_engine(podman: &Podman) -> Server {
    let socket = podman.socket_url();
    spawn(move |s, _| s.container_socket = Some(socket)).await
}

/// Registers `reference` as the image `name`.
async fn register(s: &Server, name: &str, reference: &str) {
    let (status, v) = s
        .post("/images", json!({"name": name, "reference": reference}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
}

/// A custom-image deployment of `image`, its readiness polled often.
fn container(name: &str, image: &str) -> Value {
    json!({"name": name, "type": "custom-image", "image": image,
           "readiness": {"tcp": {}, "interval_s": 0.1, "failure_threshold": 1}})
}

/// `GET /` through the gateway: the status and the page.
async fn page(s: &Server, endpoint: &str, key: &str) -> (StatusCode, String) {
    let res = s.gateway_get(endpoint, Some(key), "/").await;
    (res.status(), res.text().await.unwrap())
}

/// kep's label of a deployment's containers.
fn of(deployment: &str) -> String {
    format!("io.kep.deployment={deployment}")
}

#[tokio::test]
async fn a_container_serves_through_the_gateway_restarts_when_killed_and_goes_with_its_deployment()
{
    let podman = Podman::start();
    podman.httpd_image("kep-test/httpd:1");
    let s = on_engine(&podman).await;
    register(&s, "httpd", "kep-test/httpd:1").await;
    let key = s.endpoint("web", 1).await;
    s.deploy("web", container("app", "httpd")).await;
    let d = s.available("web", "app").await;
    assert_eq!(
        page(&s, "web", &key).await,
        (StatusCode::OK, HTTPD_INDEX.to_owned())
    );

    let made = podman.containers(&of("app"));
    assert_eq!(made.len(), 1, "{made:?}");
    let instance = d["instances"][0]["id"].as_str().unwrap();
    let inspect = |id: &str, format: &str| {
        let out = podman.run(&["inspect", "--format", format, id]);
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    assert_eq!(
        inspect(&made[0], "{{index .Config.Labels \"io.kep.instance\"}}"),
        instance
    );
    assert_eq!(
        inspect(&made[0], "{{index .Config.Labels \"io.kep.endpoint\"}}"),
        "web"
    );
    // Its pid is the container's first process as the host sees it, which the monitor reads.
    assert_eq!(
        d["instances"][0]["pid"].to_string(),
        inspect(&made[0], "{{.State.Pid}}")
    );
    // cpu-small: one CPU and 2048 MiB.
    assert_eq!(
        inspect(&made[0], "{{.HostConfig.NanoCpus}} {{.HostConfig.Memory}}"),
        format!("1000000000 {}", 2048u64 << 20)
    );

    podman.run(&["kill", &made[0]]);
    let d = s
        .wait_for("web", "app", "restarted", |d| {
            // Its restart is counted when the killed container is reaped, before the back-off
            // and the new container: ready again, it is in the new one.
            let i = &d["instances"][0];
            i["restarts"].as_u64() >= Some(1) && i["ready"] == true && d["state"] == "Available"
        })
        .await;
    assert_eq!(
        d["instances"][0]["id"], instance,
        "the same instance, in a new container"
    );
    let now = podman.containers(&of("app"));
    assert_eq!(now.len(), 1, "the killed container is removed: {now:?}");
    assert_ne!(now, made);
    assert_eq!(
        page(&s, "web", &key).await,
        (StatusCode::OK, HTTPD_INDEX.to_owned())
    );

    assert_eq!(
        s.delete("/endpoints/web/deployments/app").await,
        StatusCode::NO_CONTENT
    );
    let owner = "io.kep.owner";
    eventually(
        Duration::from_secs(15),
        "the containers are removed",
        async || {
            let left = podman.containers(owner);
            if left.is_empty() {
                Ok(())
            } else {
                Err(left.join(" "))
            }
        },
    )
    .await;
}

#[tokio::test]
async fn traffic_is_split_between_two_images() {
    let podman = Podman::start();
    let cmd = r#"CMD ["/bin/httpd","-f","-p","8080","-h","/www"]"#;
    podman.busybox_image("kep-test/page:blue", "blue", cmd);
    podman.busybox_image("kep-test/page:green", "green", cmd);
    let s = on_engine(&podman).await;
    register(&s, "blue", "kep-test/page:blue").await;
    register(&s, "green", "kep-test/page:green").await;
    let key = s.endpoint("split", 1).await;
    s.deploy("split", container("blue", "blue")).await;
    s.deploy("split", container("green", "green")).await;
    s.available("split", "blue").await;
    s.available("split", "green").await;
    let (status, t) = s
        .put(
            "/endpoints/split/traffic",
            json!({"weights": {"blue": 50, "green": 50}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{t}");
    let (mut blue, mut green) = (0, 0);
    for _ in 0..20 {
        match page(&s, "split", &key).await {
            (StatusCode::OK, p) if p == "blue" => blue += 1,
            (StatusCode::OK, p) if p == "green" => green += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((blue, green), (10, 10));
    s.service.stop().await;
    assert!(
        podman.containers("io.kep.owner").is_empty(),
        "a stopping kep removes its containers"
    );
}

#[tokio::test]
async fn a_port_nothing_listens_on_stays_out_and_an_image_that_exits_backs_off() {
    let podman = Podman::start();
    podman.httpd_image("kep-test/httpd:1");
    podman.busybox_image(
        "kep-test/exits:1",
        "",
        r#"CMD ["/bin/sh","-c","echo going away; exit 3"]"#,
    );
    let s = on_engine(&podman).await;
    register(&s, "httpd", "kep-test/httpd:1").await;
    register(&s, "exits", "kep-test/exits:1").await;
    s.endpoint("bad", 1).await;

    let mut wrong = container("wrong-port", "httpd");
    wrong["port"] = json!(9999);
    s.deploy("bad", wrong).await;
    let d = s
        .wait_for("bad", "wrong-port", "unready", |d| {
            d["instances"][0]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("readiness probe failed"))
        })
        .await;
    assert_eq!(d["state"], "Progressing", "{d}");
    assert_eq!(d["instances"][0]["ready"], false, "{d}");

    s.deploy("bad", container("exits", "exits")).await;
    let d = s
        .wait_for("bad", "exits", "in back-off", |d| {
            d["instances"][0]["restarts"].as_u64() >= Some(2)
        })
        .await;
    let instance = &d["instances"][0];
    assert_eq!(instance["state"], "Running", "{d}");
    let reason = instance["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("CrashLoopBackOff: exited: exit status: 3"),
        "{reason}"
    );
    let logs = s
        .get(&format!(
            "/endpoints/bad/deployments/exits/instances/{}/logs",
            instance["id"].as_str().unwrap()
        ))
        .await;
    assert!(logs.to_string().contains("going away"), "{logs}");
}

#[tokio::test]
async fn an_image_gone_from_the_engine_is_pending_and_a_stopped_engine_is_a_503() {
    let podman = Podman::start();
    podman.httpd_image("kep-test/httpd:1");
    let s = on_engine(&podman).await;
    register(&s, "httpd", "kep-test/httpd:1").await;
    podman.run(&["rmi", "kep-test/httpd:1"]);
    s.endpoint("gone", 1).await;
    s.deploy("gone", container("app", "httpd")).await;
    let d = s
        .wait_for("gone", "app", "image-pull back-off", |d| {
            d["instances"][0]["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("ImagePullBackOff"))
        })
        .await;
    assert_eq!(d["instances"][0]["state"], "Pending", "{d}");

    // A stopped engine: a 503 naming its socket, and no deployment made.
    let socket = podman.socket_url();
    drop(podman);
    let (status, v) = s
        .post("/endpoints/gone/deployments", container("later", "httpd"))
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains(&socket), "{message}");
    let listed = s.get("/endpoints/gone/deployments").await;
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
}

/// Listens on a socket of its own and passes every connection on to `engine`, keeping
/// what the client sent: the requests kep makes of the engine, as the engine gets them.
fn recording_proxy(
    engine: std::path::PathBuf,
) -> (tempfile::TempDir, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::UnixListener::bind(dir.path().join("proxy.sock")).unwrap();
    let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = std::sync::Arc::clone(&sent);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = tokio::net::UnixStream::connect(&engine).await.unwrap();
            let (mut client_rx, mut client_tx) = client.into_split();
            let (mut up_rx, mut up_tx) = upstream.into_split();
            let kept = std::sync::Arc::clone(&kept);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n @ 1..) = client_rx.read(&mut buf).await {
                    kept.lock().unwrap().extend_from_slice(&buf[..n]);
                    if up_tx.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut up_rx, &mut client_tx).await;
            });
        }
    });
    (dir, sent)
}

/// A GPU instance type's container asks the engine for its GPU as NVIDIA's CDI device
/// (`nvidia.com/gpu=<host index>`, a `DeviceRequest` of driver `cdi`), as Docker 25+ and
/// Podman 5 take it. This Podman (4.3) ignores the request and runs the container without
/// it, so what is checked is the request as the engine received it.
#[tokio::test]
async fn a_gpu_instance_asks_the_engine_for_its_gpu_as_a_cdi_device() {
    let podman = Podman::start();
    podman.httpd_image("kep-test/httpd:1");
    let (proxy, sent) = recording_proxy(podman.socket());
    let socket = format!("unix://{}", proxy.path().join("proxy.sock").display());
    let s = spawn(move |s, _| {
        s.container_socket = Some(socket);
        s.gpus = Some(vec![3]);
    })
    .await;
    register(&s, "httpd", "kep-test/httpd:1").await;
    let (status, v) = s
        .post(
            "/endpoints",
            json!({"name": "gpu", "instance_type": "gpu-small"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    s.deploy("gpu", container("app", "httpd")).await;
    let d = s.available("gpu", "app").await;
    assert_eq!(d["instances"][0]["gpus"], json!([3]), "{d}");
    let sent = String::from_utf8_lossy(&sent.lock().unwrap()).into_owned();
    let create = sent
        .split("POST /")
        .find(|r| r.starts_with("containers/create"))
        .unwrap_or_else(|| {
            let lines: Vec<&str> = sent.lines().filter(|l| l.contains(" HTTP/1.1")).collect();
            panic!("no container create request: {lines:?}")
        });
    // The first JSON value after the head: other requests may follow on the connection.
    let body: Value =
        serde_json::Deserializer::from_str(&create[create.find("\r\n\r\n").unwrap() + 4..])
            .into_iter()
            .next()
            .and_then(Result::ok)
            .unwrap_or_else(|| panic!("no JSON body: {create}"));
    assert_eq!(
        body["HostConfig"]["DeviceRequests"],
        json!([{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=3"]}]),
        "{body}"
    );
    // Nothing of the host's numbering reaches the container: the engine numbers its GPUs.
    let env = body["Env"].to_string();
    assert!(!env.contains("CUDA_VISIBLE_DEVICES"), "{env}");
}
