//! `kep model-server`: the process behind each instance of a model deployment.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use kep_model_server::batching::{Batching, DynamicBatching};
use kep_model_server::versions::VersionPolicy;
use kep_model_server::{Engine, MAX_MODEL_INSTANCES, Protocol, ServerConfig, TensorSpec};

#[derive(Args)]
pub struct ModelServerArgs {
    /// The API to serve.
    #[arg(long, value_enum)]
    protocol: ProtocolArg,
    /// The model's name in the API's paths.
    #[arg(long)]
    name: String,
    /// The model file: ONNX, a frozen GraphDef, a SavedModel archive or TorchScript.
    #[arg(long)]
    model: PathBuf,
    /// The serving script of `--protocol cosmos` (Rhai, with `preprocess(request)` and
    /// `postprocess(outputs, request)`).
    #[arg(long)]
    script: Option<PathBuf>,
    /// The engine that runs the model: tract (built in) or onnxruntime (loaded from
    /// ORT_DYLIB_PATH, else from the onnxruntime Python package).
    #[arg(long, env = "KEP_ENGINE", default_value = "tract")]
    engine: Engine,
    /// Threads one inference may use (ONNX Runtime's intra-op threads) [default: one per
    /// core; the runtime passes the instance type's CPUs].
    #[arg(long)]
    threads: Option<usize>,
    /// Let clients register system shared memory regions for inputs and outputs (Triton's
    /// extension, `--protocol kserve`), as Triton's `--allow-client-shm` does.
    #[arg(long)]
    allow_client_shm: bool,
    /// Copies of the model that run calls at once, each with its share of --threads
    /// (Triton's model instances, `instance_group` `count`); the onnxruntime engine's: tract
    /// runs any number of calls on one.
    #[arg(long, env = "KEP_MODEL_INSTANCES", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=i64::from(MAX_MODEL_INSTANCES)))]
    model_instances: u16,
    /// Which of the model's versions to load, as TF Serving's `version_policy`:
    /// `{"latest": n}`, `{"all": true}` or `{"specific": [v…]}`.
    #[arg(long, env = "KEP_VERSION_POLICY", default_value = r#"{"latest":1}"#, value_parser = json_arg::<VersionPolicy>)]
    version_policy: VersionPolicy,
    /// A TorchScript module's inputs, as declared at upload: a JSON list of `{name,
    /// datatype, shape}`.
    #[arg(long, value_name = "JSON")]
    inputs: Option<String>,
    /// The most batch elements one run of the model takes (Triton's `max_batch_size`): 0,
    /// the model's first dimension is not a batch one.
    #[arg(long, default_value_t = 0)]
    max_batch_size: usize,
    /// Join calls that arrive together into one run (Triton's `dynamic_batching`); needs
    /// --max-batch-size.
    #[arg(long, requires = "max_batch_size")]
    dynamic_batching: bool,
    /// How long a call may wait for others to join its batch, in microseconds.
    #[arg(long, default_value_t = 0, requires = "dynamic_batching")]
    max_queue_delay_us: u64,
    /// Batch sizes that run without waiting longer, comma-separated.
    #[arg(long, value_delimiter = ',', requires = "dynamic_batching")]
    preferred_batch_sizes: Vec<usize>,
    /// The port on 127.0.0.1 [PORT, as the runtime sets it].
    #[arg(long, env = "PORT")]
    port: u16,
}

#[derive(Clone, Copy, ValueEnum)]
enum ProtocolArg {
    /// The TensorFlow Serving REST API.
    Tfserving,
    /// KServe v2 / the Open Inference Protocol, as Triton serves it.
    Kserve,
    /// A Cosmos serving script around the model: POST /predict.
    Cosmos,
}

pub async fn run(args: ModelServerArgs) -> anyhow::Result<()> {
    crate::serve::init_tracing(crate::serve::LogFormat::Text);
    kep_model_server::run(ServerConfig {
        protocol: match args.protocol {
            ProtocolArg::Tfserving => Protocol::TfServing,
            ProtocolArg::Kserve => Protocol::Kserve,
            ProtocolArg::Cosmos => Protocol::Cosmos,
        },
        name: args.name,
        model: args.model,
        script: args.script,
        engine: args.engine,
        threads: args.threads,
        allow_client_shm: args.allow_client_shm,
        model_instances: args.model_instances.into(),
        version_policy: args.version_policy,
        inputs: (args.inputs.as_deref())
            .map(json_arg::<Vec<TensorSpec>>)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--inputs: {e}"))?,
        batching: (args.max_batch_size > 0).then(|| Batching {
            max_batch_size: args.max_batch_size,
            dynamic: args.dynamic_batching.then(|| DynamicBatching {
                max_queue_delay: Duration::from_micros(args.max_queue_delay_us),
                preferred_batch_sizes: args.preferred_batch_sizes,
            }),
        }),
        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, args.port)),
    })
    .await
}

fn json_arg<T: serde::de::DeserializeOwned>(s: &str) -> Result<T, String> {
    serde_json::from_str(s).map_err(|e| e.to_string())
}
