//! Serving across nodes: the runtime on one node, every gateway routing to it, failover,
//! and files kept through one node read on another.

use std::time::Duration;

use kep_client::AdminClient;
use serde_json::{Value, json};

use super::{Cluster, OPERATOR_TOKEN};
use crate::common::eventually;

/// Kills, when dropped, every process whose environment holds `marker`: the instances a
/// node killed -9 could not stop.
struct KillsInstances(String);

impl Drop for KillsInstances {
    fn drop(&mut self) {
        for pid in crate::crash_recovery::instance_processes(&self.0) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// The pids of the deployment's two instances once it is Available.
async fn available_pids(admin: AdminClient) -> Result<std::collections::BTreeSet<u32>, String> {
    let d = admin.deployment("moving", "app").await;
    let d = d.map_err(|e| e.to_string())?;
    let pids: std::collections::BTreeSet<u32> = d.instances.iter().filter_map(|i| i.pid).collect();
    if d.state == "Available" && pids.len() == 2 {
        Ok(pids)
    } else {
        Err(format!("{} {:?}", d.state, d.instances))
    }
}

/// What the endpoint's instance answered through `node`'s gateway: its pid.
async fn instance_pid(cluster: &Cluster, node: usize, key: &str) -> Result<u64, String> {
    let res = reqwest::Client::new()
        .get(format!(
            "{}/endpoints/moving/hello",
            cluster.nodes[node].url("gateway")
        ))
        .bearer_auth(key)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = res.status();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    match body["pid"].as_u64() {
        Some(pid) if status == 200 => Ok(pid),
        _ => Err(format!("{status} {body}")),
    }
}

/// The serving runtime runs on the one node that leads serving; management calls through
/// any node reach its instances, every node's gateway routes to them, and a key reissued
/// through one node is the only one every gateway takes. Killed -9, another node takes the
/// runtime over and starts the instances again, and the gateways answer again: the time
/// from the kill to the first good answer is printed (BENCHMARKS.md, `bench/failover.sh`).
#[tokio::test]
async fn serving_moves_to_another_node_when_its_node_is_killed() {
    let mut cluster = Cluster::start(3, &[]);
    let run = tempfile::tempdir().unwrap();
    let marker = format!("KEP_FAILOVER_RUN={}", run.path().display());
    let _instances = KillsInstances(marker.clone());
    let instance = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kep-serving/tests/instance.py")
        .canonicalize()
        .unwrap();
    let image = json!({"name": "py", "command": ["python3", instance]});
    cluster
        .admin(0)
        .create_image(&serde_json::from_value(image).unwrap())
        .await
        .unwrap();
    let endpoint = json!({"name": "moving", "instance_count": 2});
    let created = cluster
        .admin(1)
        .create_endpoint(&serde_json::from_value(endpoint).unwrap())
        .await
        .unwrap();
    let deployment = json!({"name": "app", "type": "custom-image", "image": "py",
        "env": {"KEP_FAILOVER_RUN": run.path().display().to_string()}});
    cluster
        .admin(2)
        .create_deployment("moving", &serde_json::from_value(deployment).unwrap())
        .await
        .unwrap();

    // Whichever node runs them, every node tells their state and routes to them.
    let pids = |node: usize| available_pids(cluster.admin(node));
    let first = eventually(Duration::from_secs(30), "Available", async || pids(2).await).await;
    assert_eq!(pids(0).await.unwrap(), first);
    assert_eq!(pids(1).await.unwrap(), first);
    let mut key = created.api_key.clone();
    for node in 0..3 {
        let pid = eventually(Duration::from_secs(10), "an answer", async || {
            instance_pid(&cluster, node, &key).await
        })
        .await;
        assert!(
            first.contains(&(pid as u32)),
            "node {node} answered from {pid}"
        );
    }

    // A key reissued through node 1: the old one stops working on node 3 at once.
    let reissued = cluster.admin(0).reissue_api_key("moving").await.unwrap();
    let refused = instance_pid(&cluster, 2, &key).await.unwrap_err();
    assert!(refused.starts_with("401"), "{refused}");
    key = reissued.api_key;
    instance_pid(&cluster, 2, &key).await.unwrap();

    let leader = serving_leader(&cluster).expect("a node leads serving");
    let survivor = (leader + 1) % 3;
    let victim = &mut cluster.nodes[leader].child;
    victim.kill().unwrap();
    victim.wait().unwrap();
    let killed = std::time::Instant::now();
    let mut answered = eventually(
        Duration::from_secs(30),
        "an answer after the kill",
        async || {
            let pid = instance_pid(&cluster, survivor, &key).await?;
            if first.contains(&(pid as u32)) {
                Err(format!("answered by {pid}, an instance of the killed node"))
            } else {
                Ok(pid)
            }
        },
    )
    .await;
    println!(
        "serving failover: {} ms from the kill to the first good answer",
        killed.elapsed().as_millis()
    );
    let second = eventually(Duration::from_secs(30), "Available again", async || {
        available_pids(cluster.admin(survivor)).await
    })
    .await;
    assert!(second.is_disjoint(&first), "{first:?} then {second:?}");
    assert!(second.contains(&(answered as u32)));
    let other = 3 - leader - survivor;
    answered = eventually(
        Duration::from_secs(10),
        "the third node routes",
        async || instance_pid(&cluster, other, &key).await,
    )
    .await;
    assert!(second.contains(&(answered as u32)));

    // Deleted through the node that does not run them: the new instances stop.
    cluster
        .admin(other)
        .delete_endpoint("moving")
        .await
        .unwrap();
    let running = crate::crash_recovery::instance_processes(&marker);
    assert!(
        second.iter().all(|p| !running.contains(&u64::from(*p))),
        "{second:?} still among {running:?}"
    );
}

/// The node that leads serving, by its log.
fn serving_leader(cluster: &Cluster) -> Option<usize> {
    (0..cluster.nodes.len()).find(|&n| {
        let log = cluster.nodes[n].logs();
        log.contains("leading") && log.contains("role=\"serving\"")
    })
}

/// Files kept through one node are read on another (CONTRACT §5): a model uploaded
/// through the node that does not run serving is served by the one that does, and a DRM
/// release of several chunks uploaded through one node is downloaded whole through the
/// other.
#[tokio::test]
async fn files_kept_through_one_node_are_read_on_another() {
    let cluster = Cluster::start(2, &[]);
    let client = reqwest::Client::new();
    let admin = |n: usize, path: &str| format!("{}{path}", cluster.nodes[n].admin);
    let leader = eventually(Duration::from_secs(10), "a serving leader", async || {
        serving_leader(&cluster).ok_or("none yet")
    })
    .await;
    let other = 1 - leader;

    // The model: uploaded and deployed through the other node, run by the leader.
    let models = tempfile::tempdir().unwrap();
    let _instances = KillsInstances(format!("KEP_FILES_RUN={}", models.path().display()));
    let made = std::process::Command::new("python3")
        .arg(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../kep-model-server/tests/make_models.py"),
        )
        .arg(models.path())
        .status()
        .unwrap();
    assert!(made.success());
    let form = reqwest::multipart::Form::new()
        .text("name", "mlp")
        .text("framework", "pytorch")
        .part(
            "file",
            reqwest::multipart::Part::bytes(std::fs::read(models.path().join("mlp.onnx")).unwrap())
                .file_name("mlp.onnx"),
        );
    let res = client
        .post(admin(other, "/admin/v1/serving/models"))
        .bearer_auth(OPERATOR_TOKEN)
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    let created = cluster
        .admin(other)
        .create_endpoint(&serde_json::from_value(json!({"name": "tri"})).unwrap())
        .await
        .unwrap();
    cluster
        .admin(other)
        .create_deployment(
            "tri",
            &serde_json::from_value(json!({"name": "d1", "type": "triton", "model": "mlp",
                "env": {"KEP_FILES_RUN": models.path().display().to_string()}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let infer = json!({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
        "data": [[1.0, 2.0, 3.0, 4.0]]}]});
    let answer = eventually(Duration::from_secs(60), "an inference", async || {
        let res = client
            .post(format!(
                "{}/endpoints/tri/v2/models/mlp/infer",
                cluster.nodes[other].url("gateway")
            ))
            .bearer_auth(&created.api_key)
            .json(&infer)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = res.status();
        let body: Value = res.json().await.unwrap_or(Value::Null);
        if status == 200 {
            Ok(body)
        } else {
            Err(format!("{status} {body}"))
        }
    })
    .await;
    assert_eq!(answer["outputs"][0]["shape"], json!([1, 3]));
    let leader_copy = cluster.nodes[leader].data_dir.join("serving/models");
    assert_eq!(std::fs::read_dir(leader_copy).unwrap().count(), 1);

    // The DRM release: 2.5 chunks, through node 1; the file through node 2.
    let operator = |path: &'static str, body: Value| {
        let req = client
            .post(admin(0, path))
            .bearer_auth(OPERATOR_TOKEN)
            .json(&body);
        async move { req.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let org = operator(
        "/admin/v1/adapter/org-login-types",
        json!({"method": "SAML2", "adapter_agent": "127.0.0.1:9"}),
    )
    .await;
    let session = operator(
        "/admin/v1/adapter/drm-requests",
        json!({"org_login_type_id": org["id"], "file_id": "f-1", "file_type": "DRM"}),
    )
    .await;
    let file: Vec<u8> = (0..5 * 1024 * 1024 / 2).map(|i| (i % 253) as u8).collect();
    let agent = |path: &str| {
        client
            .post(format!(
                "{}/api/trust/drm/v0/{path}",
                cluster.nodes[0].url("adapter")
            ))
            .header(
                "Authorization",
                format!("Secret {}", org["secret_key"].as_str().unwrap()),
            )
            .header("Kep-OrgLoginType", format!("ID {}", org["id"]))
            .header(
                "Kep-AgentSession",
                format!("DSID {}", session["session_id"].as_str().unwrap()),
            )
            .header("Kep-File-Id", "f-1")
    };
    let res = agent("uploadResult")
        .header("Kep-File-Type", "DRM")
        .json(&json!({"result": "SUCCESS", "reason": "several nodes"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let part = reqwest::multipart::Part::bytes(file.clone()).file_name("f-1");
    let res = agent("uploadDecrypted")
        .multipart(reqwest::multipart::Form::new().part("file", part))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
    let res = client
        .get(admin(
            1,
            &format!(
                "/admin/v1/adapter/drm-requests/{}/file",
                session["session_id"].as_str().unwrap()
            ),
        ))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let got = res.bytes().await.unwrap();
    assert!(got[..] == file[..], "the file read through node 2 differs");
}
