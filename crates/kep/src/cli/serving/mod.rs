//! `kep serving …`: the command tree here, the flags' parsing in `args`, the calls to the
//! typed client in `commands`, the terminal views of answers in `render`.

mod args;
mod commands;
mod render;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use kep_api::serving::DeploymentType;

use self::args::{SpecArgs, parse_condition, parse_interval, parse_weight};
use super::Common;

pub use self::commands::run;

#[derive(Args)]
pub struct ServingArgs {
    #[command(flatten)]
    pub(super) common: Common,
    #[command(subcommand)]
    command: ServingCommand,
}

#[derive(Subcommand)]
enum ServingCommand {
    /// Images: the command a custom-image instance runs, with PORT set, or an OCI image in
    /// the container engine.
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
    /// Register an image: `kep serving image create NAME -- COMMAND...` or `--command
    /// LINE` (a local process), `--reference REPO:TAG` (an image in the container engine's
    /// store) or `--archive FILE` (a `docker save`/`podman save` archive, streamed to the
    /// engine).
    Create {
        name: String,
        /// The command as one line, split as a shell splits words.
        #[arg(
            long,
            value_name = "LINE",
            allow_hyphen_values = true,
            required_unless_present_any = ["words", "reference", "archive"],
            conflicts_with_all = ["words", "reference", "archive"]
        )]
        command: Option<String>,
        /// An image in the container engine's local store: `repo:tag`, `repo@sha256:…` or
        /// `sha256:…` (never pulled).
        #[arg(long, value_name = "REPO:TAG", conflicts_with_all = ["words", "archive"])]
        reference: Option<String>,
        /// An image archive to load into the container engine.
        #[arg(long, value_name = "FILE", conflicts_with = "words")]
        archive: Option<PathBuf>,
        /// The command's words, after `--`.
        #[arg(last = true, value_name = "COMMAND")]
        words: Vec<String>,
    },
    /// Every image, with its size and source (reference or archive) for engine images.
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
    /// Upload a model file, streamed: ONNX, a TensorFlow frozen GraphDef, a SavedModel
    /// archive (.tar.gz or .zip, one SavedModel or numbered versions) or a TorchScript file.
    Upload {
        name: String,
        file: PathBuf,
        /// What it was trained with: tensorflow, pytorch or onnx.
        #[arg(long)]
        framework: String,
        /// A TorchScript module's inputs, which TorchScript does not record: a JSON list of
        /// {"name", "datatype", "shape"} (KServe v2 datatypes, -1 for a variable dimension).
        #[arg(long, value_name = "JSON")]
        inputs: Option<String>,
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
        /// The API key to take, 8 to 256 printable characters [default: generated].
        #[arg(long, env = "KEP_SERVING_API_KEY", hide_env_values = true)]
        api_key: Option<String>,
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
        #[arg(long, conflicts_with = "model_config")]
        clear_model_config: bool,
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
