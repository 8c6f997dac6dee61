//! `kep serving …`

use std::collections::BTreeMap;
use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand, ValueEnum};
use kep_api::serving::{Deployment, DeploymentType, HttpProbe, Mirroring, Probe, TcpProbe};
use kep_client::AdminClient;
use kep_client::serving::{
    self, AlertCondition, AlertSettings, CallMetrics, DeploymentPatch, DeploymentRequest,
    EndpointMetrics, EndpointRequest, ImageRequest, InstanceMetrics, TrafficRequest,
};

use super::{Common, print_json};

#[derive(Args)]
pub struct ServingArgs {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: ServingCommand,
}

#[derive(Subcommand)]
enum ServingCommand {
    /// Images: the command a custom-image instance runs, with PORT set.
    #[command(subcommand)]
    Image(ImageCommand),
    /// Model artifacts for the tensorflow-serving, triton and cosmos types.
    #[command(subcommand)]
    Model(ModelCommand),
    /// Endpoints: the URL callers use, its API key, its instance configuration.
    #[command(subcommand)]
    Endpoint(EndpointCommand),
    /// Deployments of an endpoint, their instances, events and logs.
    #[command(subcommand)]
    Deployment(DeploymentCommand),
    /// Show an endpoint's traffic split, or set it with --weights or --ratio.
    Traffic(TrafficArgs),
    /// Show an endpoint's mirroring, or turn it on with --responder or off with --off.
    Mirror(MirrorArgs),
    /// An endpoint's API key.
    #[command(subcommand)]
    Key(KeyCommand),
    /// The workspace compute quota, what deployments hold of it, the instance types.
    Quota,
    /// An endpoint's alert settings, and the alerts sent or given up on.
    #[command(subcommand)]
    Alerts(AlertsCommand),
    /// An endpoint's calls, deployments and instances as of now, as JSON.
    Metrics { endpoint: String },
    /// A live view of an endpoint's metrics, refreshed until Ctrl-C.
    Monitor(MonitorArgs),
}

#[derive(Subcommand)]
enum AlertsCommand {
    /// The channel toggle, webhook URL and conditions.
    Show { endpoint: String },
    /// Replace the settings whole: a condition without --on is off.
    Set {
        endpoint: String,
        /// The incoming-webhook URL alerts are POSTed to, as `{"text": …}`.
        #[arg(long, value_name = "URL")]
        webhook: Option<String>,
        /// Turn the channel off (the conditions are kept).
        #[arg(long)]
        disabled: bool,
        /// Turn a condition on, with its threshold where it takes one (repeatable):
        /// qps (requests/s), status_4xx, status_5xx, state_progressing, state_available,
        /// cpu_upper, cpu_lower, memory_upper, memory_lower, gpu_upper, gpu_lower
        /// (percent of the instance type's limit), monitoring_log.
        #[arg(long = "on", value_name = "NAME[=THRESHOLD]", value_parser = parse_condition)]
        on: Vec<(String, Option<f64>)>,
    },
    /// Alerts sent, pending or failed, newest first.
    History {
        endpoint: String,
        /// At most this many, 1 to 1000 [server default: 100].
        #[arg(long)]
        limit: Option<u32>,
    },
}

#[derive(Args)]
struct MonitorArgs {
    endpoint: String,
    /// Seconds between refreshes.
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = parse_interval)]
    interval: Duration,
    /// Print one view and exit.
    #[arg(long)]
    once: bool,
}

#[derive(Subcommand)]
enum ImageCommand {
    /// Register an image: `kep serving image create NAME -- COMMAND...` or `--command LINE`.
    Create {
        name: String,
        /// The command as one line, split as a shell splits words.
        #[arg(
            long,
            value_name = "LINE",
            allow_hyphen_values = true,
            required_unless_present = "words",
            conflicts_with = "words"
        )]
        command: Option<String>,
        /// The command's words, after `--`.
        #[arg(last = true, value_name = "COMMAND")]
        words: Vec<String>,
    },
    List,
    Show {
        name: String,
    },
    /// Deployments made from it keep running, but can no longer be edited.
    Delete {
        name: String,
    },
}

#[derive(Subcommand)]
enum ModelCommand {
    /// Upload a model file (ONNX: a TensorFlow or PyTorch model exported to it), streamed.
    Upload {
        name: String,
        file: PathBuf,
        /// What it was trained with: tensorflow, pytorch or onnx.
        #[arg(long)]
        framework: String,
    },
    List,
    Show {
        name: String,
    },
    Delete {
        name: String,
    },
}

#[derive(Subcommand)]
enum EndpointCommand {
    /// Create an endpoint; its API key is shown once.
    Create {
        name: String,
        #[arg(long, allow_hyphen_values = true)]
        description: Option<String>,
        /// One of the instance types in `kep serving quota` (fixed after creation).
        #[arg(long)]
        instance_type: Option<String>,
        /// Instances per deployment (fixed after creation).
        #[arg(long)]
        instance_count: Option<u32>,
        /// http or grpc.
        #[arg(long)]
        protocol: Option<String>,
    },
    List,
    Show {
        endpoint: String,
    },
    /// Stop every deployment's instances and forget the endpoint.
    Delete {
        endpoint: String,
    },
}

#[derive(Subcommand)]
enum KeyCommand {
    /// A new API key, shown once; the old one stops working at once.
    Reissue { endpoint: String },
}

#[derive(Subcommand)]
enum DeploymentCommand {
    /// Create a deployment; its instances start at once (see `wait`).
    Create {
        endpoint: String,
        deployment: String,
        #[arg(long = "type", value_enum, default_value_t = TypeArg::CustomImage)]
        kind: TypeArg,
        // Boxed: the probe flags make it far larger than the other commands.
        #[command(flatten)]
        spec: Box<SpecArgs>,
    },
    List {
        endpoint: String,
    },
    /// The deployment, its state and its instances.
    Show {
        endpoint: String,
        deployment: String,
    },
    /// Change the editable fields; the others are left as they are.
    Patch {
        endpoint: String,
        deployment: String,
        // Boxed: the probe flags make it far larger than the other commands.
        #[command(flatten)]
        spec: Box<SpecArgs>,
        #[arg(long, conflicts_with = "description")]
        clear_description: bool,
        #[arg(long, conflicts_with_all = ["script", "script_file"])]
        clear_script: bool,
        /// Empty the environment (--env replaces it whole).
        #[arg(long, conflicts_with = "env")]
        clear_env: bool,
        #[arg(long, conflicts_with_all = ["readiness_http", "readiness_tcp"])]
        clear_readiness: bool,
        #[arg(long, conflicts_with_all = ["liveness_http", "liveness_tcp"])]
        clear_liveness: bool,
    },
    /// Stop its instances and forget it.
    Delete {
        endpoint: String,
        deployment: String,
    },
    /// Recorded state transitions, newest first.
    Events {
        endpoint: String,
        deployment: String,
        /// At most this many [server default: 100].
        #[arg(long)]
        limit: Option<i64>,
    },
    /// What an instance wrote to stdout and stderr, across its restarts.
    Logs {
        endpoint: String,
        deployment: String,
        instance: String,
        /// The last this many bytes [server default: 65536].
        #[arg(long)]
        tail_bytes: Option<u64>,
    },
    /// Poll until the deployment is Available, showing its instances on stderr.
    Wait {
        endpoint: String,
        deployment: String,
        /// Give up (exit 1) after this many seconds.
        #[arg(long, default_value_t = 300)]
        timeout_s: u64,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum TypeArg {
    CustomImage,
    TensorflowServing,
    Triton,
    Cosmos,
}

impl From<TypeArg> for DeploymentType {
    fn from(t: TypeArg) -> Self {
        match t {
            TypeArg::CustomImage => DeploymentType::CustomImage,
            TypeArg::TensorflowServing => DeploymentType::TensorflowServing,
            TypeArg::Triton => DeploymentType::Triton,
            TypeArg::Cosmos => DeploymentType::Cosmos,
        }
    }
}

// The fields `deployment create` and `deployment patch` share. (A doc comment here would
// become `create`'s help text.)
#[derive(Args)]
struct SpecArgs {
    /// Image name (custom-image).
    #[arg(long)]
    image: Option<String>,
    /// Model name (tensorflow-serving, triton, cosmos).
    #[arg(long)]
    model: Option<String>,
    /// Serving script (cosmos): its text, or a git repository URL.
    #[arg(long, allow_hyphen_values = true, conflicts_with = "script_file")]
    script: Option<String>,
    /// Serving script (cosmos) read from a file.
    #[arg(long, value_name = "PATH")]
    script_file: Option<PathBuf>,
    /// An environment variable of the instances (repeatable).
    #[arg(long, value_name = "K=V", value_parser = parse_pair, allow_hyphen_values = true)]
    env: Vec<(String, String)>,
    /// The container port (custom-image) [server default: 8080].
    #[arg(long)]
    port: Option<u16>,
    #[arg(long, allow_hyphen_values = true)]
    description: Option<String>,
    #[command(flatten)]
    readiness: ReadinessArgs,
    #[command(flatten)]
    liveness: LivenessArgs,
}

impl SpecArgs {
    fn script(&self) -> anyhow::Result<Option<String>> {
        match &self.script_file {
            Some(path) => Ok(Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?,
            )),
            None => Ok(self.script.clone()),
        }
    }

    fn env(&self) -> BTreeMap<String, String> {
        self.env.iter().cloned().collect()
    }
}

#[derive(Args)]
struct ReadinessArgs {
    /// Readiness probe: HTTP GET of this path (a 2xx or 3xx answer passes).
    #[arg(long, value_name = "PATH", conflicts_with = "readiness_tcp")]
    readiness_http: Option<String>,
    /// Readiness probe: a TCP connection to the instance's port.
    #[arg(long)]
    readiness_tcp: bool,
    /// Readiness probe: seconds between checks.
    #[arg(long, value_name = "S")]
    readiness_interval_s: Option<f64>,
    /// Readiness probe: seconds a check may take.
    #[arg(long, value_name = "S")]
    readiness_timeout_s: Option<f64>,
    /// Readiness probe: failed checks in a row that count as a failure.
    #[arg(long, value_name = "N")]
    readiness_failure_threshold: Option<u32>,
    /// Readiness probe: seconds after the start before the first check.
    #[arg(long, value_name = "S")]
    readiness_initial_delay_s: Option<f64>,
}

#[derive(Args)]
struct LivenessArgs {
    /// Liveness probe: HTTP GET of this path (a 2xx or 3xx answer passes).
    #[arg(long, value_name = "PATH", conflicts_with = "liveness_tcp")]
    liveness_http: Option<String>,
    /// Liveness probe: a TCP connection to the instance's port.
    #[arg(long)]
    liveness_tcp: bool,
    /// Liveness probe: seconds between checks.
    #[arg(long, value_name = "S")]
    liveness_interval_s: Option<f64>,
    /// Liveness probe: seconds a check may take.
    #[arg(long, value_name = "S")]
    liveness_timeout_s: Option<f64>,
    /// Liveness probe: failed checks in a row that count as a failure.
    #[arg(long, value_name = "N")]
    liveness_failure_threshold: Option<u32>,
    /// Liveness probe: seconds after the start before the first check.
    #[arg(long, value_name = "S")]
    liveness_initial_delay_s: Option<f64>,
}

impl ReadinessArgs {
    fn probe(&self) -> anyhow::Result<Option<Probe>> {
        probe(
            "readiness",
            self.readiness_http.clone(),
            self.readiness_tcp,
            Probe {
                http: None,
                tcp: None,
                interval_s: self.readiness_interval_s,
                timeout_s: self.readiness_timeout_s,
                failure_threshold: self.readiness_failure_threshold,
                initial_delay_s: self.readiness_initial_delay_s,
            },
        )
    }
}

impl LivenessArgs {
    fn probe(&self) -> anyhow::Result<Option<Probe>> {
        probe(
            "liveness",
            self.liveness_http.clone(),
            self.liveness_tcp,
            Probe {
                http: None,
                tcp: None,
                interval_s: self.liveness_interval_s,
                timeout_s: self.liveness_timeout_s,
                failure_threshold: self.liveness_failure_threshold,
                initial_delay_s: self.liveness_initial_delay_s,
            },
        )
    }
}

/// The probe the flags describe: `timings` with the kind filled in, or none without flags.
fn probe(
    which: &str,
    http: Option<String>,
    tcp: bool,
    timings: Probe,
) -> anyhow::Result<Option<Probe>> {
    let timed = timings.interval_s.is_some()
        || timings.timeout_s.is_some()
        || timings.failure_threshold.is_some()
        || timings.initial_delay_s.is_some();
    match (http, tcp) {
        (Some(path), _) => Ok(Some(Probe {
            http: Some(HttpProbe { path }),
            ..timings
        })),
        (None, true) => Ok(Some(Probe {
            tcp: Some(TcpProbe {}),
            ..timings
        })),
        (None, false) if timed => {
            bail!("the {which} timings need --{which}-http PATH or --{which}-tcp")
        }
        (None, false) => Ok(None),
    }
}

#[derive(Args)]
struct TrafficArgs {
    endpoint: String,
    /// Percentages in steps of 5 summing to 100, e.g. a=30,b=70.
    #[arg(
        long,
        value_name = "D=PERCENT,...",
        value_delimiter = ',',
        value_parser = parse_weight,
        conflicts_with = "ratio"
    )]
    weights: Vec<(String, u32)>,
    /// One part per deployment, in creation order (or --deployments order), e.g. 1:2.
    #[arg(long)]
    ratio: Option<String>,
    /// The deployments the ratio's parts go to, in order, e.g. a,b.
    #[arg(long, value_name = "D,...", value_delimiter = ',', requires = "ratio")]
    deployments: Vec<String>,
}

#[derive(Args)]
struct MirrorArgs {
    endpoint: String,
    /// Turn mirroring on: every deployment gets each call, the caller gets this one's answer.
    #[arg(long, value_name = "DEPLOYMENT", conflicts_with = "off")]
    responder: Option<String>,
    /// Turn mirroring off.
    #[arg(long)]
    off: bool,
}

/// A clear flag sends `null`; a value sends the value; neither leaves the field as it is.
fn nullable<T>(clear: bool, value: Option<T>) -> Option<Option<T>> {
    if clear { Some(None) } else { value.map(Some) }
}

/// `D=PERCENT` of `--weights`.
fn parse_weight(s: &str) -> Result<(String, u32), String> {
    let (name, percent) = parse_pair(s)?;
    let percent = percent
        .parse()
        .map_err(|_| format!("{percent:?} is not a whole number"))?;
    Ok((name, percent))
}

/// `NAME[=THRESHOLD]` of `--on`.
fn parse_condition(s: &str) -> Result<(String, Option<f64>), String> {
    let (name, threshold) = match s.split_once('=') {
        Some((name, t)) => {
            let t: f64 = t
                .parse()
                .ok()
                .filter(|t: &f64| t.is_finite())
                .ok_or_else(|| format!("{t:?} is not a number"))?;
            (name, Some(t))
        }
        None => (s, None),
    };
    if name.is_empty() {
        return Err("the condition name is empty".into());
    }
    Ok((name.to_owned(), threshold))
}

/// `--interval`: positive seconds, fractions allowed.
fn parse_interval(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| format!("{s:?} is not a positive number of seconds"))
}

/// The whole settings `alerts set` sends: the server replaces what it has with them.
fn alert_settings(
    webhook: Option<String>,
    disabled: bool,
    on: Vec<(String, Option<f64>)>,
) -> anyhow::Result<AlertSettings> {
    let mut conditions = BTreeMap::new();
    for (name, threshold) in on {
        let cond = AlertCondition {
            enabled: true,
            threshold,
        };
        if conditions.insert(name.clone(), cond).is_some() {
            bail!("--on names {name} twice");
        }
    }
    Ok(AlertSettings {
        enabled: !disabled,
        webhook_url: webhook,
        conditions,
    })
}

/// `K=V`, split at the first `=`.
fn parse_pair(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or("expected K=V")?;
    if k.is_empty() {
        return Err("the name before `=` is empty".into());
    }
    Ok((k.to_owned(), v.to_owned()))
}

pub async fn run(args: ServingArgs) -> anyhow::Result<()> {
    let admin = args.common.admin()?;
    match args.command {
        ServingCommand::Image(cmd) => image(&admin, cmd).await,
        ServingCommand::Model(cmd) => model(&admin, cmd).await,
        ServingCommand::Endpoint(cmd) => endpoint(&admin, cmd).await,
        ServingCommand::Deployment(cmd) => deployment(&admin, cmd).await,
        ServingCommand::Traffic(t) => traffic(&admin, t).await,
        ServingCommand::Mirror(m) => {
            if m.off {
                let off = Mirroring {
                    enabled: false,
                    responder: None,
                };
                print_json(&admin.set_mirroring(&m.endpoint, &off).await?)
            } else if let Some(responder) = m.responder {
                let on = Mirroring {
                    enabled: true,
                    responder: Some(responder),
                };
                print_json(&admin.set_mirroring(&m.endpoint, &on).await?)
            } else {
                print_json(&admin.mirroring(&m.endpoint).await?)
            }
        }
        ServingCommand::Key(KeyCommand::Reissue { endpoint }) => {
            print_json(&admin.reissue_api_key(&endpoint).await?)
        }
        ServingCommand::Quota => print_json(&admin.serving_quota().await?),
        ServingCommand::Alerts(cmd) => alerts(&admin, cmd).await,
        ServingCommand::Metrics { endpoint } => {
            print_json(&admin.endpoint_metrics(&endpoint).await?)
        }
        ServingCommand::Monitor(m) => monitor(&admin, &m.endpoint, m.interval, m.once).await,
    }
}

async fn alerts(admin: &AdminClient, cmd: AlertsCommand) -> anyhow::Result<()> {
    match cmd {
        AlertsCommand::Show { endpoint } => print_json(&admin.alerts(&endpoint).await?),
        AlertsCommand::Set {
            endpoint,
            webhook,
            disabled,
            on,
        } => {
            let settings = alert_settings(webhook, disabled, on)?;
            print_json(&admin.set_alerts(&endpoint, &settings).await?)
        }
        AlertsCommand::History { endpoint, limit } => {
            print_json(&admin.alert_history(&endpoint, limit).await?)
        }
    }
}

async fn image(admin: &AdminClient, cmd: ImageCommand) -> anyhow::Result<()> {
    match cmd {
        ImageCommand::Create {
            name,
            command,
            words,
        } => {
            let command = match command {
                Some(line) => serving::Command::Line(line),
                None => serving::Command::Words(words),
            };
            print_json(&admin.create_image(&ImageRequest { name, command }).await?)
        }
        ImageCommand::List => print_json(&admin.images().await?),
        ImageCommand::Show { name } => print_json(&admin.image(&name).await?),
        ImageCommand::Delete { name } => {
            admin.delete_image(&name).await?;
            print_json(&serde_json::json!({}))
        }
    }
}

async fn model(admin: &AdminClient, cmd: ModelCommand) -> anyhow::Result<()> {
    match cmd {
        ModelCommand::Upload {
            name,
            file,
            framework,
        } => print_json(&admin.upload_model(&name, &framework, &file).await?),
        ModelCommand::List => print_json(&admin.models().await?),
        ModelCommand::Show { name } => print_json(&admin.model(&name).await?),
        ModelCommand::Delete { name } => {
            admin.delete_model(&name).await?;
            print_json(&serde_json::json!({}))
        }
    }
}

async fn endpoint(admin: &AdminClient, cmd: EndpointCommand) -> anyhow::Result<()> {
    match cmd {
        EndpointCommand::Create {
            name,
            description,
            instance_type,
            instance_count,
            protocol,
        } => {
            let req = EndpointRequest {
                name,
                description,
                instance_type,
                instance_count,
                protocol,
            };
            print_json(&admin.create_endpoint(&req).await?)
        }
        EndpointCommand::List => print_json(&admin.endpoints().await?),
        EndpointCommand::Show { endpoint } => print_json(&admin.endpoint(&endpoint).await?),
        EndpointCommand::Delete { endpoint } => {
            admin.delete_endpoint(&endpoint).await?;
            print_json(&serde_json::json!({}))
        }
    }
}

async fn deployment(admin: &AdminClient, cmd: DeploymentCommand) -> anyhow::Result<()> {
    match cmd {
        DeploymentCommand::Create {
            endpoint,
            deployment,
            kind,
            spec,
        } => {
            let req = DeploymentRequest {
                name: deployment,
                kind: kind.into(),
                script: spec.script()?,
                env: spec.env(),
                readiness: spec.readiness.probe()?,
                liveness: spec.liveness.probe()?,
                description: spec.description,
                image: spec.image,
                model: spec.model,
                port: spec.port,
            };
            print_json(&admin.create_deployment(&endpoint, &req).await?)
        }
        DeploymentCommand::List { endpoint } => print_json(&admin.deployments(&endpoint).await?),
        DeploymentCommand::Show {
            endpoint,
            deployment,
        } => print_json(&admin.deployment(&endpoint, &deployment).await?),
        DeploymentCommand::Patch {
            endpoint,
            deployment,
            spec,
            clear_description,
            clear_script,
            clear_env,
            clear_readiness,
            clear_liveness,
        } => {
            let env = if clear_env {
                Some(BTreeMap::new())
            } else {
                Some(spec.env()).filter(|e| !e.is_empty())
            };
            let patch = DeploymentPatch {
                script: nullable(clear_script, spec.script()?),
                readiness: nullable(clear_readiness, spec.readiness.probe()?),
                liveness: nullable(clear_liveness, spec.liveness.probe()?),
                description: nullable(clear_description, spec.description),
                env,
                image: spec.image,
                model: spec.model,
                port: spec.port,
            };
            print_json(
                &admin
                    .patch_deployment(&endpoint, &deployment, &patch)
                    .await?,
            )
        }
        DeploymentCommand::Delete {
            endpoint,
            deployment,
        } => {
            admin.delete_deployment(&endpoint, &deployment).await?;
            print_json(&serde_json::json!({}))
        }
        DeploymentCommand::Events {
            endpoint,
            deployment,
            limit,
        } => print_json(
            &admin
                .deployment_events(&endpoint, &deployment, limit)
                .await?,
        ),
        DeploymentCommand::Logs {
            endpoint,
            deployment,
            instance,
            tail_bytes,
        } => {
            let logs = admin
                .instance_logs(&endpoint, &deployment, &instance, tail_bytes)
                .await?;
            let mut out = std::io::stdout().lock();
            out.write_all(&logs)?;
            out.flush()?;
            Ok(())
        }
        DeploymentCommand::Wait {
            endpoint,
            deployment,
            timeout_s,
        } => {
            wait(
                admin,
                &endpoint,
                &deployment,
                Duration::from_secs(timeout_s),
            )
            .await
        }
    }
}

async fn traffic(admin: &AdminClient, t: TrafficArgs) -> anyhow::Result<()> {
    let req = if let Some(ratio) = t.ratio {
        TrafficRequest {
            ratio: Some(ratio),
            deployments: Some(t.deployments).filter(|d| !d.is_empty()),
            ..TrafficRequest::default()
        }
    } else if !t.weights.is_empty() {
        let mut weights = BTreeMap::new();
        for (name, percent) in t.weights {
            if weights.insert(name.clone(), percent).is_some() {
                bail!("--weights names {name} twice");
            }
        }
        TrafficRequest {
            weights: Some(weights),
            ..TrafficRequest::default()
        }
    } else {
        return print_json(&admin.traffic(&t.endpoint).await?);
    };
    print_json(&admin.set_traffic(&t.endpoint, &req).await?)
}

/// Polls every 500 ms. On a terminal the progress line is rewritten in place; elsewhere a
/// line is written each time it changes, so that logs stay short.
async fn wait(
    admin: &AdminClient,
    endpoint: &str,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    const AVAILABLE: &str = "Available";
    let wanted = admin.endpoint(endpoint).await?.instance_count;
    let deadline = Instant::now() + timeout;
    let tty = std::io::stderr().is_terminal();
    let mut last = String::new();
    loop {
        let d = admin.deployment(endpoint, name).await?;
        let line = progress(&d, wanted);
        if tty {
            eprint!("\r\x1b[2K{line}");
        } else if line != last {
            eprintln!("{line}");
        }
        let done = d.state == AVAILABLE;
        let now = Instant::now();
        if tty && (done || now >= deadline) {
            eprintln!();
        }
        if done {
            return print_json(&d);
        }
        if now >= deadline {
            bail!(
                "deployment {name} of endpoint {endpoint} is not {AVAILABLE} after {} s: {line}",
                timeout.as_secs()
            );
        }
        last = line;
        tokio::time::sleep(Duration::from_millis(500).min(deadline - now)).await;
    }
}

/// `blue: Progressing, 0/2 ready; blue-x52cy: Running, not ready, 1 restarts (…); …`
fn progress(d: &Deployment, wanted: u32) -> String {
    let ready = d.instances.iter().filter(|i| i.ready).count();
    let mut line = format!("{}: {}, {ready}/{wanted} ready", d.name, d.state);
    for i in &d.instances {
        line.push_str(&format!(
            "; {}: {}, {}",
            i.id,
            i.state,
            if i.ready { "ready" } else { "not ready" }
        ));
        if i.restarts > 0 {
            line.push_str(&format!(", {} restarts", i.restarts));
        }
        if let Some(reason) = &i.reason {
            line.push_str(&format!(" ({reason})"));
        }
    }
    line
}

/// Fetches and prints the view every `interval` until Ctrl-C; an API error ends it. The
/// screen is cleared only on a terminal, so that a pipe gets every view, one after another.
async fn monitor(
    admin: &AdminClient,
    endpoint: &str,
    interval: Duration,
    once: bool,
) -> anyhow::Result<()> {
    let clear = !once && std::io::stdout().is_terminal();
    // One listener for the whole loop: a Ctrl-C during a fetch is not lost between listeners.
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut first = true;
    loop {
        let m = tokio::select! {
            m = admin.endpoint_metrics(endpoint) => m?,
            _ = &mut ctrl_c => return Ok(()),
        };
        let view = render_monitor(&m);
        {
            let mut out = std::io::stdout().lock();
            if clear {
                out.write_all(b"\x1b[2J\x1b[H")?;
            } else if !first {
                out.write_all(b"\n")?;
            }
            out.write_all(view.as_bytes())?;
            out.flush()?;
        }
        if once {
            return Ok(());
        }
        first = false;
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = &mut ctrl_c => return Ok(()),
        }
    }
}

/// The monitor's view of one metrics answer: the endpoint's calls, then each deployment's
/// calls and mirror counts over a table of its instances.
fn render_monitor(m: &EndpointMetrics) -> String {
    let mut out = format!("endpoint {}  at {}\n", m.endpoint, m.at);
    out.push_str(&format!("  {}\n", calls_line(&m.calls, true)));
    if m.deployments.is_empty() {
        out.push_str("\n  no deployments\n");
    }
    for d in &m.deployments {
        out.push_str(&format!("\ndeployment {}  {}\n", d.name, d.state));
        out.push_str(&format!("  {}\n", calls_line(&d.calls, false)));
        out.push_str(&format!(
            "  mirror answered {}  failed {}\n",
            d.mirror.answered, d.mirror.failed
        ));
        if d.instances.is_empty() {
            out.push_str("  no instances\n");
            continue;
        }
        let mut rows = vec![
            [
                "INSTANCE", "STATE", "READY", "RESTARTS", "CPU", "CPU%", "MEM MiB", "MEM%", "GPU%",
            ]
            .map(String::from),
        ];
        rows.extend(d.instances.iter().map(instance_row));
        out.push_str(&table(&rows));
    }
    out
}

/// `qps 1.5  requests 20  2xx 18  4xx 1  5xx 1  in flight 0  p50/p90/p99 1.0/2.0/3.0 ms`
fn calls_line(c: &CallMetrics, in_flight: bool) -> String {
    let mut line = format!("qps {:.1}  requests {}", c.qps, c.requests);
    // 2xx, 4xx and 5xx always, as zeros too; the other classes only once seen.
    for class in ["1xx", "2xx", "3xx", "4xx", "5xx"] {
        let n = c.status.get(class).copied().unwrap_or(0);
        if n > 0 || matches!(class, "2xx" | "4xx" | "5xx") {
            line.push_str(&format!("  {class} {n}"));
        }
    }
    if in_flight {
        line.push_str(&format!("  in flight {}", c.in_flight));
    }
    match &c.latency_ms {
        Some(l) => line.push_str(&format!(
            "  p50/p90/p99 {:.1}/{:.1}/{:.1} ms",
            l.p50, l.p90, l.p99
        )),
        None => line.push_str("  p50/p90/p99 -"),
    }
    line
}

fn instance_row(i: &InstanceMetrics) -> [String; 9] {
    fn or_dash(v: Option<f64>, decimals: usize) -> String {
        v.map_or_else(|| "-".into(), |v| format!("{v:.decimals$}"))
    }
    [
        i.id.clone(),
        i.state.clone(),
        if i.ready { "yes" } else { "no" }.into(),
        i.restarts.to_string(),
        or_dash(i.cpu_cores, 2),
        or_dash(i.cpu_percent, 1),
        or_dash(i.memory_bytes.map(|b| b as f64 / (1024.0 * 1024.0)), 1),
        or_dash(i.memory_percent, 1),
        or_dash(i.gpu_percent, 1),
    ]
}

/// Indented columns, text left-aligned and numbers (every column after the third) right.
fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (col, (cell, w)) in row.iter().zip(widths).enumerate() {
            if col < 3 {
                line.push_str(&format!("  {cell:<w$}"));
            } else {
                line.push_str(&format!("  {cell:>w$}"));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use clap::Parser as _;
    use kep_client::serving::{
        CallMetrics, DeploymentMetrics, EndpointMetrics, InstanceMetrics, Latency, MirrorMetrics,
    };

    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        serving: ServingCommand,
    }

    #[test]
    fn alerts_set_builds_the_whole_settings() {
        let cli = Cli::try_parse_from([
            "kep",
            "alerts",
            "set",
            "e",
            "--webhook",
            "http://hook",
            "--on",
            "qps=12.5",
            "--on",
            "status_5xx",
        ])
        .unwrap();
        let ServingCommand::Alerts(AlertsCommand::Set {
            webhook,
            disabled,
            on,
            ..
        }) = cli.serving
        else {
            panic!("not alerts set");
        };
        let s = alert_settings(webhook, disabled, on).unwrap();
        assert!(s.enabled);
        assert_eq!(s.webhook_url.as_deref(), Some("http://hook"));
        assert_eq!(s.conditions.len(), 2);
        assert_eq!(s.conditions["qps"].threshold, Some(12.5));
        assert!(s.conditions["status_5xx"].enabled);
        assert_eq!(s.conditions["status_5xx"].threshold, None);
    }

    #[test]
    fn a_bad_threshold_is_a_usage_error() {
        for bad in ["cpu_upper=high", "cpu_upper=", "cpu_upper=NaN", "=5"] {
            assert!(
                Cli::try_parse_from(["kep", "alerts", "set", "e", "--on", bad]).is_err(),
                "{bad}"
            );
        }
        assert!(alert_settings(None, true, vec![("qps".into(), None); 2]).is_err());
    }

    #[test]
    fn the_interval_is_positive_seconds() {
        assert_eq!(parse_interval("0.5"), Ok(Duration::from_millis(500)));
        assert!(parse_interval("0").is_err());
        assert!(parse_interval("-1").is_err());
    }

    fn calls(requests: u64, qps: f64, status: &[(&str, u64)], p99: f64) -> CallMetrics {
        CallMetrics {
            requests,
            qps,
            status: status.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            in_flight: 3,
            latency_ms: Some(Latency {
                p50: 4.3,
                p90: 9.5,
                p99,
            }),
        }
    }

    #[test]
    fn the_monitor_view_shows_the_numbers() {
        let m = EndpointMetrics {
            endpoint: "sentiment".into(),
            at: "2025-06-01T12:00:00Z".into(),
            calls: calls(1234, 42.5, &[("2xx", 1200), ("4xx", 30), ("5xx", 4)], 77.7),
            deployments: vec![
                DeploymentMetrics {
                    name: "blue".into(),
                    state: "Available".into(),
                    calls: calls(1000, 30.0, &[("2xx", 990), ("5xx", 10)], 55.5),
                    mirror: MirrorMetrics {
                        answered: 17,
                        failed: 2,
                    },
                    instances: vec![InstanceMetrics {
                        id: "blue-x52cy".into(),
                        state: "Running".into(),
                        ready: true,
                        restarts: 6,
                        cpu_cores: Some(0.25),
                        cpu_percent: Some(12.5),
                        memory_bytes: Some(256 * 1024 * 1024),
                        memory_percent: Some(25.0),
                        gpu_percent: None,
                    }],
                },
                DeploymentMetrics {
                    name: "green".into(),
                    state: "Progressing".into(),
                    calls: CallMetrics {
                        status: BTreeMap::new(),
                        ..CallMetrics::default()
                    },
                    mirror: MirrorMetrics::default(),
                    instances: vec![],
                },
            ],
        };
        let view = render_monitor(&m);
        for want in [
            "sentiment",
            "qps 42.5",
            "requests 1234",
            "2xx 1200",
            "4xx 30",
            "5xx 4",
            "in flight 3",
            "4.3/9.5/77.7 ms",
            "deployment blue  Available",
            "requests 1000",
            "5xx 10",
            "55.5 ms",
            "mirror answered 17  failed 2",
            "blue-x52cy",
            "Running",
            "0.25",
            "12.5",
            "256.0",
            "25.0",
            "deployment green  Progressing",
            "p50/p90/p99 -",
            "no instances",
        ] {
            assert!(view.contains(want), "{want:?} missing from\n{view}");
        }
        let row = view.lines().find(|l| l.contains("blue-x52cy")).unwrap();
        assert!(row.ends_with(" -"), "no GPU dash in {row:?}");
        assert!(row.contains(" yes "), "{row:?}");
        assert!(!view.contains('\x1b'));
    }
}
