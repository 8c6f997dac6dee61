//! Instance containers (CONTRACT §3 "Container images"): one container per instance start,
//! made from the image pinned by its engine id, labelled with kep's ids, its port published
//! on 127.0.0.1, its logs copied into the instance's log file, and removed when it stops.
//! A restart makes a new container, so kep's back-off, not the engine's, paces restarts.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use bollard::Docker;
use bollard::errors::Error as EngineError;
use bollard::models::{ContainerCreateBody, DeviceRequest, HostConfig, PortBinding};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, LogsOptionsBuilder,
    RemoveContainerOptionsBuilder, StopContainerOptionsBuilder,
};
use futures_util::StreamExt as _;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::engine::Engine;

/// The label every container kep makes carries: the data dir of the kep that made it, as
/// the process runtime marks its processes. A restarted kep removes the containers of its
/// own mark and no other.
pub const OWNER_LABEL: &str = "io.kep.owner";
pub const ENDPOINT_LABEL: &str = "io.kep.endpoint";
pub const DEPLOYMENT_LABEL: &str = "io.kep.deployment";
pub const INSTANCE_LABEL: &str = "io.kep.instance";

/// Waiting for a container's exit and following its logs last as long as it runs.
const FOREVER: Duration = Duration::from_secs(365 * 24 * 3600);
/// How long the log copy may take to catch up after the container stopped.
const LOG_DRAIN: Duration = Duration::from_secs(2);

/// What an instance of an engine image runs.
#[derive(Debug, Clone)]
pub struct ContainerLaunch {
    /// The engine's id of the image (`sha256:…`), which pins it however its tag moves.
    pub image: String,
    /// The reference it was registered by, for the log and the reasons.
    pub reference: String,
    /// The port the image listens on inside the container.
    pub port: u16,
    /// The instance type's CPUs, in billionths (the engine's `NanoCpus`).
    pub nano_cpus: i64,
    /// The instance type's memory in bytes; 0 for none.
    pub memory: i64,
}

/// The ids a container is labelled with.
pub struct Labels<'a> {
    pub owner: &'a str,
    pub endpoint: &'a str,
    pub deployment: &'a str,
    pub instance: &'a str,
}

/// Why a container did not start, as the instance's reason says it.
pub enum StartError {
    /// The image is not in the engine's store (kep never pulls).
    ImageMissing(String),
    Failed(String),
}

/// A started container: its exit, its log copy, and the client to stop it with.
pub struct Container {
    docker: Docker,
    id: String,
    /// Its first process as the host sees it (the engine's `State.Pid`), so that the
    /// monitor reads the container's CPU and memory as a process instance's, its
    /// processes being that one's descendants.
    pub pid: Option<u32>,
    exited: oneshot::Receiver<Result<i64, String>>,
    logs: JoinHandle<()>,
}

/// Creates and starts the container; returns it and the host port its port is published on.
pub async fn start(
    engine: &Engine,
    launch: &ContainerLaunch,
    env: &BTreeMap<String, String>,
    gpus: &[u32],
    labels: Labels<'_>,
    log: &Path,
) -> Result<(Container, u16), StartError> {
    let docker = engine
        .client()
        .await
        .map_err(|e| StartError::Failed(e.to_string()))?;
    // Before the container exists, so a failure leaves none behind.
    let mut file = open_log(log)
        .await
        .map_err(|e| StartError::Failed(e.to_string()))?;
    let host_port = super::process::free_port().map_err(|e| StartError::Failed(e.to_string()))?;
    let port = format!("{}/tcp", launch.port);
    let config = ContainerCreateBody {
        image: Some(launch.image.clone()),
        env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        labels: Some(HashMap::from([
            (OWNER_LABEL.to_owned(), labels.owner.to_owned()),
            (ENDPOINT_LABEL.to_owned(), labels.endpoint.to_owned()),
            (DEPLOYMENT_LABEL.to_owned(), labels.deployment.to_owned()),
            (INSTANCE_LABEL.to_owned(), labels.instance.to_owned()),
        ])),
        exposed_ports: Some(vec![port.clone()]),
        host_config: Some(HostConfig {
            port_bindings: Some(HashMap::from([(
                port,
                Some(vec![PortBinding {
                    host_ip: Some("127.0.0.1".into()),
                    host_port: Some(host_port.to_string()),
                }]),
            )])),
            nano_cpus: (launch.nano_cpus > 0).then_some(launch.nano_cpus),
            memory: (launch.memory > 0).then_some(launch.memory),
            // NVIDIA's CDI names of the instance's GPUs (Docker 25+ with CDI enabled).
            device_requests: (!gpus.is_empty()).then(|| {
                vec![DeviceRequest {
                    driver: Some("cdi".into()),
                    device_ids: Some(gpus.iter().map(|i| format!("nvidia.com/gpu={i}")).collect()),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let name = format!("kep-{}-{}", labels.endpoint, labels.instance);
    let options = CreateContainerOptionsBuilder::new().name(&name).build();
    let id = match docker.create_container(Some(options), config).await {
        Ok(created) => created.id,
        Err(EngineError::DockerResponseServerError {
            status_code: 404, ..
        }) => {
            return Err(StartError::ImageMissing(format!(
                "image {} ({}) is not in the container engine's store",
                launch.reference, launch.image
            )));
        }
        Err(e) => return Err(StartError::Failed(format!("creating the container: {e}"))),
    };
    let header = format!(
        "--- kep: starting container {name} of {} ({}), port {} on 127.0.0.1:{host_port}\n",
        launch.reference, launch.image, launch.port
    );
    let _ = file.write_all(header.as_bytes()).await;
    if let Err(e) = docker.start_container(&id, None).await {
        remove(&docker, &id).await;
        return Err(StartError::Failed(format!("starting the container: {e}")));
    }
    let long = docker.clone().with_timeout(FOREVER);
    let (tell, exited) = oneshot::channel();
    let waiter = long.clone();
    let waited = id.clone();
    tokio::spawn(async move {
        let mut waits = waiter.wait_container(&waited, None);
        let exit = match waits.next().await {
            Some(Ok(answer)) => Ok(answer.status_code),
            Some(Err(EngineError::DockerContainerWaitError { code, .. })) => Ok(code),
            Some(Err(e)) => Err(format!("waiting for the container: {e}")),
            None => Err("the engine ended the wait with no exit".into()),
        };
        let _ = tell.send(exit);
    });
    let logs = tokio::spawn(copy_logs(long, id.clone(), file));
    let pid = docker
        .inspect_container(&id, None)
        .await
        .ok()
        .and_then(|c| c.state?.pid)
        .and_then(|p| u32::try_from(p).ok())
        .filter(|&p| p > 0);
    Ok((
        Container {
            docker,
            id,
            pid,
            exited,
            logs,
        },
        host_port,
    ))
}

impl Container {
    /// Its exit code once it stops; cancel-safe.
    pub async fn wait(&mut self) -> Result<i64, String> {
        (&mut self.exited)
            .await
            .unwrap_or_else(|_| Err("the wait for the container ended".into()))
    }

    /// SIGTERM, SIGKILL after `grace` (the engine's stop), then the container is removed.
    pub async fn terminate(self, grace: Duration) {
        let t = i32::try_from(grace.as_secs()).unwrap_or(i32::MAX);
        let options = StopContainerOptionsBuilder::new().t(t).build();
        let _ = self.docker.stop_container(&self.id, Some(options)).await;
        self.remove().await;
    }

    /// Removes it, stopped or not, once its last log lines are copied.
    pub async fn remove(self) {
        let _ = tokio::time::timeout(LOG_DRAIN, self.logs).await;
        remove(&self.docker, &self.id).await;
    }
}

async fn remove(docker: &Docker, id: &str) {
    let options = RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build();
    if let Err(e) = docker.remove_container(id, Some(options)).await {
        tracing::warn!(container = id, error = %e, "removing an instance container");
    }
}

async fn open_log(log: &Path) -> std::io::Result<tokio::fs::File> {
    if let Some(dir) = log.parent() {
        kep_core::private::dir_async(dir).await?;
    }
    let mut options = kep_core::private::options();
    options.append(true);
    tokio::fs::OpenOptions::from(options).open(log).await
}

/// Appends the container's stdout and stderr to the instance's log until it stops.
async fn copy_logs(docker: Docker, id: String, mut file: tokio::fs::File) {
    let options = LogsOptionsBuilder::new()
        .follow(true)
        .stdout(true)
        .stderr(true)
        .build();
    let mut lines = docker.logs(&id, Some(options));
    while let Some(Ok(chunk)) = lines.next().await {
        if file.write_all(&chunk.into_bytes()).await.is_err() {
            return;
        }
    }
    let _ = file.flush().await;
}

/// Removes every container, running or not, labelled with `owner`: the ones a kep killed
/// outright left behind (none is this kep's yet: this runs before any instance starts).
/// No engine answering means there are none to find.
pub async fn remove_left_behind(engine: &Engine, owner: &str) -> usize {
    let Ok(docker) = engine.client().await else {
        return 0;
    };
    let filters = HashMap::from([("label", vec![format!("{OWNER_LABEL}={owner}")])]);
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    let found = match docker.list_containers(Some(options)).await {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(error = %e, "listing the containers a previous kep left");
            return 0;
        }
    };
    let mut removed = 0;
    for container in found {
        // The engine filtered by label; checked again, as no other container may be touched.
        let ours = container
            .labels
            .as_ref()
            .and_then(|l| l.get(OWNER_LABEL))
            .is_some_and(|o| o == owner);
        if let (true, Some(id)) = (ours, container.id) {
            remove(&docker, &id).await;
            removed += 1;
        }
    }
    removed
}
