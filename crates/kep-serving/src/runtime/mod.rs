//! The runtime: each deployment's instances as real processes, supervised by one task per
//! deployment. The control plane drives it through [`RuntimeHandle`]; it tells the gateway
//! which instances are ready and records every transition as an event.

pub mod container;
pub mod gpus;
mod instance;
pub mod probe;
pub mod process;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kep_core::activity::ServiceActivity;
use kep_core::clock::Clock;
use kep_core::retry::Backoff;
use rand::Rng as _;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::ids::{DeploymentKey, DeploymentName, EndpointName, InstanceId};
use crate::kinds::{DeploymentState, InstanceState};
use crate::store::{Change, Lifecycle, NewEvent, Store};
pub use instance::InstanceStatus;
use instance::{InstanceTask, Report};
use kep_gateway::RouteUpdate;
use probe::ProbeSpec;

/// What an instance of a deployment runs.
#[derive(Debug)]
pub struct Launch {
    /// What runs, or why there is nothing that can be run.
    pub command: Result<Workload, String>,
    pub env: BTreeMap<String, String>,
    /// GPUs of its own each instance process is given (its instance type's).
    pub gpus: u32,
    pub readiness: ProbeSpec,
    pub liveness: Option<ProbeSpec>,
}

/// An instance's process, or its container: the same life either way.
#[derive(Debug)]
pub enum Workload {
    /// The argv of a local process.
    Process(Vec<String>),
    Container(container::ContainerLaunch),
}

/// Restarts back off; a process that ran for `reset_after` starts from the first wait
/// again. Stopping waits `drain` after leaving rotation before SIGTERM, then `grace`
/// before SIGKILL.
#[derive(Debug, Clone, Copy)]
pub struct RestartPolicy {
    pub backoff: Backoff,
    pub reset_after: Duration,
    pub grace: Duration,
    pub drain: Duration,
}

/// A deployment as the runtime sees it now.
#[derive(Debug, Clone)]
pub struct DeploymentStatus {
    pub state: DeploymentState,
    pub instances: Vec<InstanceStatus>,
}

enum Command {
    Apply {
        key: DeploymentKey,
        launch: Arc<Launch>,
        count: u32,
        /// Made at kep's start from the store ([`RuntimeHandle::resume`]).
        resumed: bool,
    },
    Remove {
        key: DeploymentKey,
        done: oneshot::Sender<()>,
    },
    Status {
        key: DeploymentKey,
        reply: oneshot::Sender<DeploymentStatus>,
    },
    Statuses {
        reply: oneshot::Sender<Vec<(DeploymentKey, DeploymentStatus)>>,
    },
    Shutdown {
        done: oneshot::Sender<()>,
    },
}

/// The control plane's side of the runtime.
#[derive(Clone)]
pub struct RuntimeHandle {
    tx: mpsc::UnboundedSender<Command>,
}

impl RuntimeHandle {
    /// Creates the deployment's instances, or rolls them over to `launch`.
    pub fn apply(&self, key: DeploymentKey, launch: Launch, count: u32) {
        self.send_apply(key, launch, count, false);
    }

    /// Brings a stored deployment's instances up at kep's start: its states until it is
    /// Available are kep's doing ([`Lifecycle::Started`]), not the deployment's.
    pub fn resume(&self, key: DeploymentKey, launch: Launch, count: u32) {
        self.send_apply(key, launch, count, true);
    }

    fn send_apply(&self, key: DeploymentKey, launch: Launch, count: u32, resumed: bool) {
        let _ = self.tx.send(Command::Apply {
            key,
            launch: Arc::new(launch),
            count,
            resumed,
        });
    }

    /// Stops every instance of the deployment; returns once they have ended.
    pub async fn remove(&self, key: DeploymentKey) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Command::Remove { key, done }).is_ok() {
            let _ = wait.await;
        }
    }

    pub async fn status(&self, key: DeploymentKey) -> Option<DeploymentStatus> {
        let (reply, answer) = oneshot::channel();
        self.tx.send(Command::Status { key, reply }).ok()?;
        answer.await.ok()
    }

    /// Every deployment's status.
    pub async fn statuses(&self) -> Vec<(DeploymentKey, DeploymentStatus)> {
        let (reply, answer) = oneshot::channel();
        if self.tx.send(Command::Statuses { reply }).is_err() {
            return Vec::new();
        }
        answer.await.unwrap_or_default()
    }

    /// Stops every instance of every deployment.
    pub async fn shutdown(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Command::Shutdown { done }).is_ok() {
            let _ = wait.await;
        }
    }
}

/// What the runtime's tasks share.
pub struct RuntimeContext {
    /// The mark of this kep's instance processes.
    pub owner: process::Owner,
    /// The GPUs instance processes are given.
    pub gpus: Arc<gpus::GpuPool>,
    /// Where engine images' containers run.
    pub engine: crate::engine::Engine,
    pub logs_dir: PathBuf,
    pub policy: RestartPolicy,
    pub http: reqwest::Client,
    pub routes: mpsc::UnboundedSender<RouteUpdate>,
    pub events: mpsc::UnboundedSender<NewEvent>,
    /// What events are dated by.
    pub clock: Clock,
    /// The runtime's tasks: they end once the runtime is shut down, and the platform
    /// waits for them.
    pub tasks: TaskTracker,
}

impl RuntimeContext {
    /// Where an instance's stdout and stderr go.
    pub fn log_path(&self, key: &DeploymentKey, instance: &InstanceId) -> PathBuf {
        log_path(&self.logs_dir, &key.endpoint, &key.deployment, instance)
    }
}

pub fn start(ctx: RuntimeContext) -> RuntimeHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    let tasks = ctx.tasks.clone();
    tasks.spawn(run(Arc::new(ctx), rx));
    RuntimeHandle { tx }
}

async fn run(ctx: Arc<RuntimeContext>, mut rx: mpsc::UnboundedReceiver<Command>) {
    let mut supervisors: HashMap<DeploymentKey, mpsc::UnboundedSender<SupervisorCommand>> =
        HashMap::new();
    while let Some(cmd) = rx.recv().await {
        match cmd {
            Command::Apply {
                key,
                launch,
                count,
                resumed,
            } => {
                if let Some(tx) = supervisors.get(&key)
                    && tx
                        .send(SupervisorCommand::Update(Arc::clone(&launch)))
                        .is_ok()
                {
                    continue;
                }
                let (tx, cmds) = mpsc::unbounded_channel();
                let (supervisor, reports) =
                    Supervisor::new(Arc::clone(&ctx), key.clone(), launch, count, resumed);
                ctx.tasks.spawn(supervisor.run(cmds, reports));
                supervisors.insert(key, tx);
            }
            Command::Remove { key, done } => match supervisors.remove(&key) {
                Some(tx) => {
                    let _ = tx.send(SupervisorCommand::Stop { done, kep: false });
                }
                None => {
                    let _ = done.send(());
                }
            },
            Command::Status { key, reply } => {
                if let Some(tx) = supervisors.get(&key) {
                    let _ = tx.send(SupervisorCommand::Status(reply));
                }
            }
            Command::Statuses { reply } => {
                let asks: Vec<_> = supervisors
                    .iter()
                    .filter_map(|(key, tx)| {
                        let (ask, answer) = oneshot::channel();
                        tx.send(SupervisorCommand::Status(ask)).ok()?;
                        Some((key.clone(), answer))
                    })
                    .collect();
                // Gathered apart, so the loop goes on taking commands meanwhile.
                ctx.tasks.spawn(async move {
                    let mut all = Vec::with_capacity(asks.len());
                    for (key, answer) in asks {
                        if let Ok(status) = answer.await {
                            all.push((key, status));
                        }
                    }
                    let _ = reply.send(all);
                });
            }
            Command::Shutdown { done } => {
                let mut waits = Vec::new();
                for (_, tx) in supervisors.drain() {
                    let (stopped, wait) = oneshot::channel();
                    let stop = SupervisorCommand::Stop {
                        done: stopped,
                        kep: true,
                    };
                    if tx.send(stop).is_ok() {
                        waits.push(wait);
                    }
                }
                for w in waits {
                    let _ = w.await;
                }
                let _ = done.send(());
                return;
            }
        }
    }
}

enum SupervisorCommand {
    Update(Arc<Launch>),
    Status(oneshot::Sender<DeploymentStatus>),
    /// Stop every instance; `kep` when it is kep that stops.
    Stop {
        done: oneshot::Sender<()>,
        kep: bool,
    },
}

/// One instance as its supervisor tracks it.
struct Member {
    status: InstanceStatus,
    generation: u64,
    slot: u32,
    cancel: CancellationToken,
}

impl Member {
    fn stopping(&self) -> bool {
        self.cancel.is_cancelled()
    }
}

/// Owns one deployment's instances. A change of launch starts a new generation beside the
/// old one; each old instance stops once the new one in its slot is ready (a rolling update).
struct Supervisor {
    ctx: Arc<RuntimeContext>,
    key: DeploymentKey,
    launch: Arc<Launch>,
    count: u32,
    generation: u64,
    members: Vec<Member>,
    state: Option<DeploymentState>,
    /// What kep's own start or stop is doing to the deployment, while it does.
    lifecycle: Option<Lifecycle>,
    ready: Vec<SocketAddr>,
    reports: mpsc::UnboundedSender<Report>,
}

impl Supervisor {
    /// The supervisor, and the receiver of its instances' reports.
    fn new(
        ctx: Arc<RuntimeContext>,
        key: DeploymentKey,
        launch: Arc<Launch>,
        count: u32,
        resumed: bool,
    ) -> (Self, mpsc::UnboundedReceiver<Report>) {
        let (reports, report_rx) = mpsc::unbounded_channel();
        let supervisor = Supervisor {
            ctx,
            key,
            launch,
            count,
            generation: 0,
            members: Vec::new(),
            state: None,
            lifecycle: resumed.then_some(Lifecycle::Started),
            ready: Vec::new(),
            reports,
        };
        (supervisor, report_rx)
    }

    async fn run(
        mut self,
        mut cmds: mpsc::UnboundedReceiver<SupervisorCommand>,
        mut reports: mpsc::UnboundedReceiver<Report>,
    ) {
        self.start_generation();
        self.publish();
        let mut stopped: Option<oneshot::Sender<()>> = None;
        let mut stopping = false;
        loop {
            tokio::select! {
                cmd = cmds.recv() => match cmd {
                    Some(SupervisorCommand::Update(launch)) if !stopping => {
                        // A change of the user's: what follows is the deployment's doing.
                        self.lifecycle = None;
                        self.launch = launch;
                        self.generation += 1;
                        self.start_generation();
                    }
                    Some(SupervisorCommand::Update(_)) => {}
                    Some(SupervisorCommand::Status(reply)) => {
                        let _ = reply.send(self.snapshot());
                    }
                    Some(SupervisorCommand::Stop { done, kep }) => {
                        stopping = true;
                        self.lifecycle = kep.then_some(Lifecycle::Stopping);
                        stopped = Some(done);
                        self.members.iter().for_each(|m| m.cancel.cancel());
                    }
                    None if !stopping => {
                        stopping = true;
                        self.members.iter().for_each(|m| m.cancel.cancel());
                    }
                    None => {}
                },
                Some(report) = reports.recv() => self.on_report(report),
            }
            if stopping && self.members.is_empty() {
                break;
            }
            self.publish();
        }
        let _ = self.ctx.routes.send(RouteUpdate::Backends {
            key: self.key.gateway(),
            ready: Vec::new(),
        });
        if let Some(done) = stopped {
            let _ = done.send(());
        }
    }

    fn start_generation(&mut self) {
        for slot in 0..self.count {
            let id = InstanceId::from(format!("{}-{}", self.key.deployment, short_id()));
            let cancel = CancellationToken::new();
            let task = InstanceTask {
                id: id.clone(),
                key: self.key.clone(),
                engine: self.ctx.engine.clone(),
                launch: Arc::clone(&self.launch),
                log: self.ctx.log_path(&self.key, &id),
                policy: self.ctx.policy,
                owner: self.ctx.owner.clone(),
                gpus: Arc::clone(&self.ctx.gpus),
                http: self.ctx.http.clone(),
                reports: self.reports.clone(),
                cancel: cancel.clone(),
            };
            self.members.push(Member {
                status: InstanceStatus::new(id),
                generation: self.generation,
                slot,
                cancel,
            });
            self.ctx.tasks.spawn(task.run());
        }
    }

    fn on_report(&mut self, report: Report) {
        let Some(i) = self
            .members
            .iter()
            .position(|m| m.status.id == report.status.id)
        else {
            return;
        };
        let new = report.status;
        let old = std::mem::replace(&mut self.members[i].status, new.clone());
        if old.state != new.state {
            self.event(Change::Instance {
                instance: new.id.clone(),
                from: old.state,
                to: new.state,
                reason: new.reason.clone(),
            });
        }
        if old.ready != new.ready {
            self.event(Change::Ready {
                instance: new.id.clone(),
                ready: new.ready,
                reason: new.reason.clone(),
            });
        }
        if new.restarts > old.restarts {
            self.event(Change::Restart {
                instance: new.id.clone(),
                reason: new.reason.clone(),
            });
        }
        let (generation, slot) = (self.members[i].generation, self.members[i].slot);
        if (new.ready || report.awaits_gpus) && generation == self.generation {
            // The new instance of this slot serves, or waits for the GPUs its predecessor
            // holds (a rolling update with no GPU to spare): its predecessor goes.
            for m in &self.members {
                if m.slot == slot && m.generation < generation {
                    m.cancel.cancel();
                }
            }
        }
        if report.finished {
            self.members.remove(i);
        }
    }

    fn event(&self, change: Change) {
        let _ = self.ctx.events.send(NewEvent {
            at_ms: self.ctx.clock.unix_ms(),
            endpoint: self.key.endpoint.clone(),
            deployment: self.key.deployment.clone(),
            change,
        });
    }

    /// Available once every instance of the current generation is ready and no older one
    /// remains; Progressing otherwise (also with zero instances, as the document says).
    fn deployment_state(&self) -> DeploymentState {
        let current: Vec<&Member> = self
            .members
            .iter()
            .filter(|m| m.generation == self.generation && !m.stopping())
            .collect();
        let settled = self.count > 0
            && current.len() == self.count as usize
            && current.iter().all(|m| m.status.ready)
            && self.members.len() == current.len();
        if settled {
            DeploymentState::Available
        } else {
            DeploymentState::Progressing
        }
    }

    /// Tells the gateway of a change in the ready set, and records a change of state.
    fn publish(&mut self) {
        let ready: Vec<SocketAddr> = self
            .members
            .iter()
            .filter(|m| m.status.ready && !m.stopping())
            .filter_map(|m| Some(SocketAddr::from(([127, 0, 0, 1], m.status.port?))))
            .collect();
        if ready != self.ready {
            self.ready = ready.clone();
            let _ = self.ctx.routes.send(RouteUpdate::Backends {
                key: self.key.gateway(),
                ready,
            });
        }
        let state = self.deployment_state();
        if self.state != Some(state) {
            let from = self.state.replace(state);
            self.event(Change::Deployment {
                from,
                to: state,
                lifecycle: self.lifecycle,
            });
            if state == DeploymentState::Available {
                self.lifecycle = None;
            }
        }
    }

    fn snapshot(&self) -> DeploymentStatus {
        DeploymentStatus {
            state: self.deployment_state(),
            instances: self.members.iter().map(|m| m.status.clone()).collect(),
        }
    }
}

/// Five random characters of a-z and 0-9, as pod names end.
fn short_id() -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}

/// An instance's log: `<logs>/<endpoint>/<deployment>/<instance>.log`.
fn log_path(
    logs_dir: &std::path::Path,
    endpoint: &EndpointName,
    deployment: &DeploymentName,
    instance: &InstanceId,
) -> PathBuf {
    logs_dir
        .join(endpoint.as_str())
        .join(deployment.as_str())
        .join(format!("{instance}.log"))
}

/// Where the runtime's events go besides the store: the platform's activity, with the
/// last lines of an instance's log when it failed or restarts.
pub struct Recorded {
    pub activity: ServiceActivity,
    pub logs_dir: PathBuf,
}

/// How much of an instance's log an activity event of its failure carries.
const LOG_TAIL_BYTES: u64 = 4096;
const LOG_TAIL_LINES: usize = 20;

impl Recorded {
    fn record(&self, e: &NewEvent) {
        let state = |s: Option<&str>| s.map_or(Value::Null, |s| s.to_lowercase().into());
        let (event, instance, detail) = match &e.change {
            Change::Deployment {
                from,
                to,
                lifecycle,
            } => (
                "deployment.state",
                None,
                json!({
                    "from": state(from.map(|f| f.as_str())),
                    "to": state(Some(to.as_str())),
                    "reason": lifecycle.map(Lifecycle::as_str),
                }),
            ),
            Change::Instance {
                instance,
                from,
                to,
                reason,
            } => {
                let mut detail = json!({ "from": state(Some(from.as_str())), "to": state(Some(to.as_str())), "reason": reason });
                if *to == InstanceState::Failed {
                    detail["log"] = self.log_tail(e, instance).into();
                }
                ("instance.state", Some(instance), detail)
            }
            Change::Ready {
                instance,
                ready,
                reason,
            } => (
                if *ready {
                    "instance.ready"
                } else {
                    "instance.unready"
                },
                Some(instance),
                json!({ "reason": reason }),
            ),
            Change::Restart { instance, reason } => (
                "instance.restarted",
                Some(instance),
                json!({ "reason": reason, "log": self.log_tail(e, instance) }),
            ),
        };
        let (endpoint, deployment) = (&e.endpoint, &e.deployment);
        match instance {
            Some(i) => self
                .activity
                .record(event, &[endpoint, deployment, i], detail),
            None => self.activity.record(event, &[endpoint, deployment], detail),
        }
    }

    /// The last lines the instance wrote (stdout and stderr), at most 4 KiB of them.
    fn log_tail(&self, e: &NewEvent, instance: &InstanceId) -> Vec<String> {
        use std::io::{Read as _, Seek as _, SeekFrom};
        let path = log_path(&self.logs_dir, &e.endpoint, &e.deployment, instance);
        let Ok(mut file) = std::fs::File::open(path) else {
            return Vec::new();
        };
        let len = file.metadata().map_or(0, |m| m.len());
        let start = len.saturating_sub(LOG_TAIL_BYTES);
        let mut text = Vec::new();
        if file.seek(SeekFrom::Start(start)).is_err() || file.read_to_end(&mut text).is_err() {
            return Vec::new();
        }
        let text = String::from_utf8_lossy(&text);
        let mut lines: Vec<&str> = text.lines().collect();
        // A cut-off first line is not one the instance wrote.
        if start > 0 && !lines.is_empty() {
            lines.remove(0);
        }
        let skip = lines.len().saturating_sub(LOG_TAIL_LINES);
        lines[skip..].iter().map(|l| (*l).to_owned()).collect()
    }
}

/// Writes each event to the store and the activity, and hands it on to whoever listens
/// (alerts).
pub async fn record_events(
    store: Arc<dyn Store>,
    mut rx: mpsc::UnboundedReceiver<NewEvent>,
    listeners: tokio::sync::broadcast::Sender<NewEvent>,
    recorded: Recorded,
) {
    while let Some(e) = rx.recv().await {
        if let Err(err) = store.insert_event(&e).await {
            tracing::warn!(error = %err, "recording a serving event");
        }
        recorded.record(&e);
        let _ = listeners.send(e);
    }
}
