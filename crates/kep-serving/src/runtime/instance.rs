//! One instance's life: spawn, probe, restart with back-off, stop. It reports every change
//! of its state to its deployment's supervisor.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use tokio::process::Child;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::gpus::{GpuLease, GpuPool};
use super::{Launch, RestartPolicy, Workload, container, probe, process};
use crate::engine::Engine;
use crate::ids::{DeploymentKey, InstanceId};
use crate::kinds::InstanceState;
use kep_api::serving::Instance;

/// An instance as the runtime tracks it.
#[derive(Debug, Clone)]
pub struct InstanceStatus {
    pub id: InstanceId,
    pub state: InstanceState,
    pub ready: bool,
    pub restarts: u32,
    pub reason: Option<String>,
    pub pid: Option<u32>,
    pub port: Option<u16>,
    /// The GPUs its process holds.
    pub gpus: Vec<u32>,
}

impl InstanceStatus {
    /// A new instance: pending, no process yet.
    pub fn new(id: InstanceId) -> Self {
        InstanceStatus {
            id,
            state: InstanceState::Pending,
            ready: false,
            restarts: 0,
            reason: None,
            pid: None,
            port: None,
            gpus: Vec::new(),
        }
    }

    /// As the API shows it.
    pub fn view(&self) -> Instance {
        Instance {
            id: self.id.to_string(),
            state: self.state.as_str().to_owned(),
            ready: self.ready,
            restarts: self.restarts,
            reason: self.reason.clone(),
            pid: self.pid,
            port: self.port,
            gpus: self.gpus.clone(),
        }
    }
}

/// What an instance tells its supervisor: its whole status, and whether it has ended.
#[derive(Debug)]
pub struct Report {
    pub status: InstanceStatus,
    pub finished: bool,
    /// It cannot start until GPUs are given back.
    pub awaits_gpus: bool,
}

pub struct InstanceTask {
    pub id: InstanceId,
    pub key: DeploymentKey,
    pub engine: Engine,
    pub launch: Arc<Launch>,
    pub log: PathBuf,
    pub policy: RestartPolicy,
    pub owner: process::Owner,
    pub gpus: Arc<GpuPool>,
    pub http: reqwest::Client,
    pub reports: mpsc::UnboundedSender<Report>,
    pub cancel: CancellationToken,
}

/// The reason of an instance whose image the engine does not have (kep never pulls).
const IMAGE_MISSING: &str = "ErrImagePull";

/// An instance's process group, or its container.
enum Running {
    /// The pid is kept: a reaped child no longer tells it, and its group outlives it.
    Process(Child, Option<u32>),
    Container(container::Container),
}

impl Running {
    fn pid(&self) -> Option<u32> {
        match self {
            Running::Process(_, pid) => *pid,
            Running::Container(c) => c.pid,
        }
    }

    /// How it exited, as `exit status: N` says it; cancel-safe.
    async fn wait(&mut self) -> Result<String, String> {
        match self {
            Running::Process(child, _) => child
                .wait()
                .await
                .map(|code| code.to_string())
                .map_err(|e| format!("waiting for the process: {e}")),
            Running::Container(c) => c.wait().await.map(|code| format!("exit status: {code}")),
        }
    }

    /// After its exit: what its group left behind is killed, its container removed.
    async fn reap(self) {
        match self {
            Running::Process(_, pid) => {
                if let Some(pid) = pid {
                    process::signal_group(pid, nix::sys::signal::Signal::SIGKILL);
                }
            }
            Running::Container(c) => c.remove().await,
        }
    }

    async fn terminate(self, grace: std::time::Duration) {
        match self {
            Running::Process(mut child, _) => process::terminate(&mut child, grace).await,
            Running::Container(c) => c.terminate(grace).await,
        }
    }
}

/// How a running process stopped being watched.
enum Outcome {
    /// `exit status: N`, or the signal.
    Exited(String),
    LivenessFailed(String),
    /// Waiting on the process failed: its state cannot be told.
    Unknown(String),
    Cancelled,
}

impl InstanceTask {
    fn report(&self, status: &InstanceStatus, finished: bool) {
        let _ = self.reports.send(Report {
            status: status.clone(),
            finished,
            awaits_gpus: false,
        });
    }

    pub async fn run(self) {
        let mut status = InstanceStatus::new(self.id.clone());
        self.report(&status, false);
        let mut waits = self.policy.backoff.waits();
        let mut ever_ready = false;
        loop {
            let started = Instant::now();
            match &self.launch.command {
                Err(reason) => {
                    // Nothing to run until the deployment is changed: wait to be stopped.
                    status.reason = Some(reason.clone());
                    self.report(&status, false);
                    self.cancel.cancelled().await;
                    break;
                }
                Ok(workload) => {
                    let waiting = |why: String| {
                        status.state = InstanceState::Pending;
                        status.reason = Some(why);
                        let _ = self.reports.send(Report {
                            status: status.clone(),
                            finished: false,
                            awaits_gpus: true,
                        });
                    };
                    // Held until the process group or container is gone, whatever ends it.
                    let Some(gpus) = self
                        .gpus
                        .take(self.launch.gpus, &self.cancel, waiting)
                        .await
                    else {
                        break;
                    };
                    match self.start(workload, &mut status, &gpus).await {
                        Err(reason) => {
                            status.state = InstanceState::Pending;
                            status.reason = Some(reason);
                        }
                        Ok(mut running) => {
                            let outcome =
                                self.watch(&mut running, &mut status, &mut ever_ready).await;
                            status.pid = None;
                            status.ready = false;
                            match outcome {
                                Outcome::Cancelled => {
                                    status.state = InstanceState::Terminating;
                                    self.report(&status, false);
                                    // Out of rotation already; calls the gateway sent just before
                                    // finish before the process is asked to stop.
                                    tokio::time::sleep(self.policy.drain).await;
                                    running.terminate(self.policy.grace).await;
                                    break;
                                }
                                Outcome::Exited(code) => {
                                    running.reap().await;
                                    status.state = InstanceState::Failed;
                                    status.reason = Some(format!("exited: {code}"));
                                }
                                Outcome::LivenessFailed(why) => {
                                    running.terminate(self.policy.grace).await;
                                    status.state = InstanceState::Pending;
                                    status.reason = Some(format!("liveness probe failed: {why}"));
                                }
                                Outcome::Unknown(why) => {
                                    // Reported as such, then stopped and started again.
                                    status.state = InstanceState::Unknown;
                                    status.reason = Some(why);
                                    self.report(&status, false);
                                    running.terminate(self.policy.grace).await;
                                }
                            }
                        }
                    }
                    status.gpus.clear();
                }
            }
            // A restart: after a back-off that grows while it keeps failing.
            if started.elapsed() >= self.policy.reset_after {
                waits = self.policy.backoff.waits();
            }
            status.restarts += 1;
            status.port = None;
            if !ever_ready && let Some(r) = &status.reason {
                // An image the engine does not have backs off as a pull would.
                status.reason = Some(match r.strip_prefix(IMAGE_MISSING) {
                    Some(rest) => format!("ImagePullBackOff{rest}"),
                    None => format!("CrashLoopBackOff: {r}"),
                });
                // The seed shows an instance that keeps starting and stopping as `Running`,
                // with the restart back-off as its reason.
                if status.state == InstanceState::Failed {
                    status.state = InstanceState::Running;
                }
            }
            self.report(&status, false);
            tokio::select! {
                _ = tokio::time::sleep(waits.next_wait()) => {}
                _ = self.cancel.cancelled() => break,
            }
        }
        status.state = InstanceState::Terminated;
        status.ready = false;
        status.pid = None;
        status.port = None;
        self.report(&status, true);
    }

    /// Starts the process or the container; the reason it could not be started otherwise.
    async fn start(
        &self,
        workload: &Workload,
        status: &mut InstanceStatus,
        gpus: &GpuLease,
    ) -> Result<Running, String> {
        let (running, port) = match workload {
            Workload::Process(argv) => {
                let not_found = |e: std::io::Error| format!("CommandNotFound: {}: {e}", argv[0]);
                let port = process::free_port().map_err(not_found)?;
                let env = process::Env {
                    vars: &self.launch.env,
                    port,
                    gpus: gpus.devices(),
                };
                let child = process::spawn(argv, env, &self.log, &self.owner).map_err(not_found)?;
                let pid = child.id();
                (Running::Process(child, pid), port)
            }
            Workload::Container(launch) => {
                let labels = container::Labels {
                    owner: self.owner.as_str(),
                    endpoint: self.key.endpoint.as_str(),
                    deployment: self.key.deployment.as_str(),
                    instance: self.id.as_str(),
                };
                let env = &self.launch.env;
                container::start(&self.engine, launch, env, gpus.devices(), labels, &self.log)
                    .await
                    .map(|(c, port)| (Running::Container(c), port))
                    .map_err(|e| match e {
                        container::StartError::ImageMissing(why) => {
                            format!("{IMAGE_MISSING}: {why}")
                        }
                        container::StartError::Failed(why) => {
                            format!("CreateContainerError: {why}")
                        }
                    })?
            }
        };
        status.state = InstanceState::Pending;
        status.reason = None;
        status.pid = running.pid();
        status.port = Some(port);
        status.gpus = gpus.devices().to_vec();
        self.report(status, false);
        Ok(running)
    }

    async fn watch(
        &self,
        running: &mut Running,
        status: &mut InstanceStatus,
        ever_ready: &mut bool,
    ) -> Outcome {
        let port = status.port.unwrap_or_default();
        let readiness = self.launch.readiness.clone();
        let threshold = readiness.failure_threshold;
        let (_ready_task, mut ready_rx) = probe::spawn(readiness, port, self.http.clone());
        let (_live_task, mut live_rx) = match &self.launch.liveness {
            Some(spec) => {
                let (task, rx) = probe::spawn(spec.clone(), port, self.http.clone());
                (Some(task), Some(rx))
            }
            None => (None, None),
        };
        let live_threshold = self
            .launch
            .liveness
            .as_ref()
            .map_or(u32::MAX, |l| l.failure_threshold);
        let (mut ready_fails, mut live_fails) = (0u32, 0u32);
        loop {
            tokio::select! {
                exit = running.wait() => {
                    return match exit {
                        Ok(code) => Outcome::Exited(code),
                        Err(why) => Outcome::Unknown(why),
                    };
                }
                _ = self.cancel.cancelled() => return Outcome::Cancelled,
                Some(result) = ready_rx.recv() => match result {
                    Ok(()) => {
                        ready_fails = 0;
                        if !status.ready {
                            status.ready = true;
                            status.state = InstanceState::Running;
                            status.reason = None;
                            *ever_ready = true;
                            self.report(status, false);
                        }
                    }
                    Err(why) => {
                        ready_fails += 1;
                        let reason = Some(format!("readiness probe failed: {why}"));
                        // Reported once at the threshold, and again when the cause changes.
                        if ready_fails >= threshold && (status.ready || status.reason != reason) {
                            status.ready = false;
                            status.reason = reason;
                            self.report(status, false);
                        }
                    }
                },
                Some(result) = async { live_rx.as_mut()?.recv().await } => match result {
                    Ok(()) => live_fails = 0,
                    // A process still starting up is not yet failing: liveness counts from
                    // its first readiness on, so a slow start does not become a crash loop.
                    Err(_) if status.state != InstanceState::Running => {}
                    Err(why) => {
                        live_fails += 1;
                        if live_fails >= live_threshold {
                            return Outcome::LivenessFailed(why);
                        }
                    }
                },
            }
        }
    }
}
