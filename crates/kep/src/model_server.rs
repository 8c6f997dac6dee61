//! `kep model-server`: the process behind each instance of a model deployment.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use kep_model_server::{Engine, MAX_MODEL_INSTANCES, Protocol, ServerConfig};

#[derive(Args)]
pub struct ModelServerArgs {
    /// The API to serve.
    #[arg(long, value_enum)]
    protocol: ProtocolArg,
    /// The model's name in the API's paths.
    #[arg(long)]
    name: String,
    /// The model file (ONNX).
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
        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, args.port)),
    })
    .await
}
