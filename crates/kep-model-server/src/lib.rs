//! The model server kep starts as each instance of a `tensorflow-serving`, `triton` or
//! `cosmos` deployment (`kep model-server`): one registered model, loaded into the
//! built-in engine before the port opens, behind the wire protocol its users already call:
//! the TensorFlow Serving REST and gRPC APIs or the KServe v2 (Open Inference) protocol.

pub mod artifact;
pub mod batching;
mod compression;
pub mod cosmos;
pub mod framework;
pub mod kserve;
pub mod model;
pub mod native;
#[cfg(feature = "onnxruntime")]
pub mod onnxruntime;
pub mod shm;
pub mod stats;
pub mod tensor;
pub mod tfserving;
pub mod versions;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

pub use model::{DataType, Engine, Model, ModelError, TensorSpec};

/// Which API the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// TensorFlow Serving REST: `/v1/models/{m}[:predict]`.
    TfServing,
    /// KServe v2 / Open Inference Protocol: `/v2/models/{m}/infer`.
    Kserve,
    /// A Cosmos serving script around the model: `POST /predict`.
    Cosmos,
}

/// The model a server serves, under its registered name: the versions it loaded, each
/// with its signatures, and its inference statistics.
pub struct Served {
    pub name: String,
    /// Ascending, never empty: the last is served when a call names none.
    pub versions: Vec<Version>,
    pub stats: Arc<stats::Statistics>,
    /// The GPUs this process was given (`CUDA_VISIBLE_DEVICES`), as it numbers them: 0…n-1.
    pub gpus: Vec<i32>,
    /// Copies of the model that run calls at once (Triton's `instance_group` `count`).
    pub model_instances: usize,
    /// Clients' system shared memory regions (Triton's extension; KServe only).
    pub shared_memory: shm::SharedMemory,
    /// Triton's logging and trace settings, as the server keeps them (KServe only).
    pub settings: kserve::settings::Settings,
    /// Whether the model is loaded, as Triton's model repository extension loads and
    /// unloads it: unloaded, it is kept in memory but answers as a model with no version.
    loaded: AtomicBool,
    /// How calls are batched (Triton's dynamic batcher), if they are.
    pub batching: Option<batching::Batching>,
    /// Each version's default model and the batcher of its calls.
    batchers: Vec<(Arc<Model>, batching::Batcher)>,
}

/// One loaded version of the model.
pub struct Version {
    pub number: i64,
    /// `serving_default` (or the one signature a file has) first.
    pub signatures: Vec<Signature>,
    /// The SignatureDefs as the SavedModel holds them, for TF Serving's metadata; `None`
    /// for a file, whose one signature is described from its inputs and outputs.
    pub signature_defs: Option<tfserving::grpc::SignatureDefs>,
}

/// One signature of a version: what a call names with `signature_name`.
pub struct Signature {
    pub name: String,
    /// TF Serving's `method_name` (`tensorflow/serving/predict`, …).
    pub method: String,
    pub model: Arc<Model>,
}

/// A file's one signature, and a call that names none.
pub const DEFAULT_SIGNATURE: &str = "serving_default";

impl Version {
    /// A model file as version 1: its one signature, whose method its inputs and outputs
    /// tell.
    pub fn of_file(model: Model) -> Version {
        let method = tfserving::Method::of(&model.inputs, &model.outputs)
            .name()
            .to_owned();
        Version {
            number: 1,
            signatures: vec![Signature {
                name: DEFAULT_SIGNATURE.into(),
                method,
                model: Arc::new(model),
            }],
            signature_defs: None,
        }
    }

    /// The signature a call names; an empty name is the default one.
    pub fn signature(&self, name: &str) -> Option<&Signature> {
        if name.is_empty() {
            return Some(self.default_signature());
        }
        self.signatures.iter().find(|s| s.name == name)
    }

    pub fn default_signature(&self) -> &Signature {
        &self.signatures[0]
    }

    /// The model of the default signature: what a protocol without signatures runs.
    pub fn model(&self) -> &Arc<Model> {
        &self.default_signature().model
    }
}

impl Served {
    pub fn new(name: impl Into<String>, versions: Vec<Version>) -> Served {
        assert!(!versions.is_empty(), "a served model has a version");
        Served {
            name: name.into(),
            versions,
            stats: Arc::new(stats::Statistics::default()),
            gpus: Vec::new(),
            model_instances: 1,
            shared_memory: shm::SharedMemory::new(false),
            settings: kserve::settings::Settings::default(),
            loaded: AtomicBool::new(true),
            batching: None,
            batchers: Vec::new(),
        }
    }

    /// Batches the calls of each version's default model as `batching` says, on
    /// [`Served::model_instances`] copies; a model whose inputs and outputs do not all start
    /// with a batch dimension (-1) cannot be. Called within the server's runtime.
    pub fn batch(&mut self, batching: batching::Batching) -> Result<(), ModelError> {
        for version in &self.versions {
            batching::check(version.model(), batching.max_batch_size)?;
        }
        self.batchers = (self.versions.iter())
            .map(|v| {
                let model = Arc::clone(v.model());
                let batcher = batching::Batcher::start(
                    Arc::clone(&model),
                    batching.clone(),
                    self.model_instances,
                    Arc::clone(&self.stats),
                );
                (model, batcher)
            })
            .collect();
        self.batching = Some(batching);
        Ok(())
    }

    /// A model file served as its one version.
    pub fn of_file(name: impl Into<String>, model: Model) -> Served {
        Served::new(name, vec![Version::of_file(model)])
    }

    pub fn is_loaded(&self) -> bool {
        self.loaded.load(Ordering::Relaxed)
    }

    pub fn set_loaded(&self, loaded: bool) {
        self.loaded.store(loaded, Ordering::Relaxed);
    }

    /// The highest loaded version.
    pub fn latest(&self) -> &Version {
        self.versions.last().expect("a served model has a version")
    }

    /// The version a call names, or the latest when it names none.
    pub fn version(&self, number: Option<i64>) -> Option<&Version> {
        match number {
            None => Some(self.latest()),
            Some(n) => self.versions.iter().find(|v| v.number == n),
        }
    }

    /// The latest version's default model: what Cosmos scripts run.
    pub fn model(&self) -> &Arc<Model> {
        self.latest().model()
    }

    /// Runs `model` off the async workers (inference is CPU-bound), timing it on `clock`:
    /// the inputs are read when this is called.
    async fn run<I: Into<model::Input>>(
        &self,
        model: &Arc<Model>,
        clock: &mut stats::Clock,
        inputs: Vec<(String, I)>,
    ) -> Result<Vec<tract_onnx::prelude::Tensor>, ModelError> {
        clock.inputs_read();
        let inputs: Vec<(String, model::Input)> =
            inputs.into_iter().map(|(n, i)| (n, i.into())).collect();
        if let Some((_, batcher)) = self.batchers.iter().find(|(m, _)| Arc::ptr_eq(m, model)) {
            let ran = batcher.run(inputs).await?;
            clock.ran(ran.queue, ran.infer);
            clock.batched(ran.elements);
            return ran.outputs;
        }
        let model = Arc::clone(model);
        let queued = std::time::Instant::now();
        let interpreter = model.interpreter();
        let work = move || {
            let started = std::time::Instant::now();
            let result = model.run(inputs);
            (started - queued, started.elapsed(), result)
        };
        let failed = |e: String| ModelError::Failed(format!("inference task: {e}"));
        let (queue, infer, result) = match interpreter {
            // Straight to the thread that runs it, not by way of the blocking pool.
            Some(interpreter) => {
                let (done, ran) = tokio::sync::oneshot::channel();
                (interpreter.execute(Box::new(move || {
                    let _ = done.send(work());
                })))
                .map_err(failed)?;
                ran.await.map_err(|e| failed(e.to_string()))?
            }
            None => (tokio::task::spawn_blocking(work).await).map_err(|e| failed(e.to_string()))?,
        };
        clock.ran(queue, infer);
        result
    }
}

/// A failed call, answered as `{"error": "…"}` (both protocols' shape).
#[derive(Debug)]
pub struct Failure {
    status: StatusCode,
    message: String,
}

impl Failure {
    pub fn bad_request(message: impl Into<String>) -> Failure {
        Failure {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> Failure {
        Failure {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }

    pub fn method_not_allowed() -> Failure {
        Failure {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: "Method Not Allowed".into(),
        }
    }

    pub fn not_implemented(message: impl Into<String>) -> Failure {
        Failure {
            status: StatusCode::NOT_IMPLEMENTED,
            message: message.into(),
        }
    }

    pub fn payload_too_large(message: impl Into<String>) -> Failure {
        Failure {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: message.into(),
        }
    }

    pub fn unavailable(message: impl Into<String>) -> Failure {
        Failure {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
        }
    }

    pub fn internal(message: impl Into<String>) -> Failure {
        Failure {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
        }
    }
}

impl From<ModelError> for Failure {
    fn from(e: ModelError) -> Failure {
        match e {
            ModelError::BadInput(_) => Failure::bad_request(e.to_string()),
            _ => Failure::internal(e.to_string()),
        }
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(serde_json::json!({ "error": self.message })),
        )
            .into_response()
    }
}

/// The routes of `protocol` for the served model; Cosmos needs its script.
pub fn router(
    protocol: Protocol,
    served: Arc<Served>,
    script: Option<Arc<cosmos::Script>>,
) -> axum::Router {
    let routes = match (protocol, script) {
        // REST and gRPC on the one port: gRPC comes as HTTP/2 on its own paths.
        (Protocol::TfServing, _) => {
            tfserving::router(Arc::clone(&served)).merge(tfserving::grpc::router(served))
        }
        (Protocol::Kserve, _) => {
            kserve::router(Arc::clone(&served)).merge(kserve::grpc::router(served))
        }
        (Protocol::Cosmos, Some(script)) => cosmos::router(served, script),
        (Protocol::Cosmos, None) => panic!("a Cosmos server needs its script"),
    };
    // Bodies of any Content-Type are read as the protocol's JSON (tritonclient sends none).
    routes.layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
}

/// Most copies of a model one model server runs (`--model-instances`, the deployment
/// variable `KEP_MODEL_INSTANCES`): each is the model's memory again.
pub const MAX_MODEL_INSTANCES: u16 = 16;

/// Larger request bodies are refused (the gateway already stops them at 20 MB).
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// What `kep model-server` is given.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub protocol: Protocol,
    pub name: String,
    pub model: PathBuf,
    /// The Cosmos serving script.
    pub script: Option<PathBuf>,
    pub engine: Engine,
    /// Threads one inference may use; `None`, the engine's default (tract uses one).
    pub threads: Option<usize>,
    /// Whether clients may register shared memory regions (Triton's `--allow-client-shm`).
    pub allow_client_shm: bool,
    /// Copies of the model that run calls at once (Triton's model instances); the
    /// onnxruntime engine's, as tract runs any number of calls on one.
    pub model_instances: usize,
    /// Which of the model's versions to load.
    pub version_policy: versions::VersionPolicy,
    /// A TorchScript module's inputs, as declared at upload.
    pub inputs: Option<Vec<TensorSpec>>,
    /// Triton's dynamic batcher, where the deployment's `model_config` asks for it.
    pub batching: Option<batching::Batching>,
    pub addr: SocketAddr,
}

/// Loads the model, then listens: the port opens only once the model can run, so a
/// readiness probe passes only then. Serves until SIGTERM or SIGINT.
pub async fn run(config: ServerConfig) -> anyhow::Result<()> {
    let script = match (&config.script, config.protocol) {
        (Some(path), Protocol::Cosmos) => {
            let source = std::fs::read_to_string(path)?;
            Some(Arc::new(
                cosmos::Script::compile(&source).map_err(anyhow::Error::msg)?,
            ))
        }
        (None, Protocol::Cosmos) => anyhow::bail!("a Cosmos server needs --script"),
        _ => None,
    };
    let path = config.model.clone();
    let engine = config.engine;
    // The GPUs kep gave this process, which it numbers 0…n-1 whatever their host indices;
    // an entry CUDA cannot read (`-1`) hides it and every one after it, as CUDA does.
    let gpus: Vec<i32> = std::env::var("CUDA_VISIBLE_DEVICES")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .take_while(|d| !d.is_empty() && !d.starts_with('-'))
        .zip(0..)
        .map(|(_, i)| i)
        .collect();
    #[cfg(feature = "onnxruntime")]
    {
        if let Some(threads) = config.threads {
            onnxruntime::use_intra_threads(threads);
        }
        onnxruntime::use_gpus(gpus.len());
        onnxruntime::use_sessions(config.model_instances);
        onnxruntime::use_spinning(config.batching.as_ref().is_none_or(|b| b.dynamic.is_none()));
    }
    let (policy, inputs, threads, instances) = (
        config.version_policy.clone(),
        config.inputs.clone(),
        config.threads,
        config.model_instances,
    );
    let loaded = tokio::task::spawn_blocking(move || {
        let runtime = versions::Runtime {
            threads,
            instances,
            in_process: true,
        };
        versions::load(&path, engine, &policy, inputs.as_deref(), runtime)
    })
    .await??;
    for version in &loaded.versions {
        for signature in &version.signatures {
            tracing::info!(
                model = %config.name,
                version = version.number,
                signature = %signature.name,
                engine = signature.model.engine_name(),
                inputs = ?signature.model.inputs,
                outputs = ?signature.model.outputs,
                "model loaded"
            );
        }
    }
    let mut served = Served::new(config.name, loaded.versions);
    served.gpus = gpus;
    served.shared_memory = shm::SharedMemory::new(config.allow_client_shm);
    served.model_instances = config.model_instances;
    if let Some(batching) = config.batching {
        served.batch(batching)?;
    }
    let served = Arc::new(served);
    // The unpacked SavedModel stays until the server stops.
    let _unpacked = loaded.unpacked;
    if let Some(worker) = loaded.worker {
        tokio::spawn(exit_with(worker));
    }
    let listener = tokio::net::TcpListener::bind(config.addr).await?;
    serve(listener, router(config.protocol, served, script)).await
}

/// HTTP/2's flow-control windows, connection and stream alike. hyper's 1 MiB let a batch of
/// images (19 MB for 32 ResNet-50 inputs) arrive a window at a time, each waiting for the
/// window's update: gRPC took twice REST's time over loopback.
const HTTP2_WINDOW_BYTES: u32 = 16 << 20;
/// The largest HTTP/2 frame a client may send: 1 MiB frames rather than 16 KiB ones took a
/// tenth off such a batch's time over loopback (14.7–14.9 ms → 13.2).
const HTTP2_MAX_FRAME_BYTES: u32 = 1 << 20;

/// HTTP/1.1 and HTTP/2 (gRPC) on one port, until SIGTERM; then the calls under way finish.
async fn serve(listener: tokio::net::TcpListener, app: axum::Router) -> anyhow::Result<()> {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto;
    use hyper_util::service::TowerToHyperService;
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http2()
        .initial_stream_window_size(HTTP2_WINDOW_BYTES)
        .initial_connection_window_size(HTTP2_WINDOW_BYTES)
        .max_frame_size(HTTP2_MAX_FRAME_BYTES);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let stop = stop_signal();
    tokio::pin!(stop);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                // Out of descriptors, say: the calls under way go on; a later accept may work.
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        // No Nagle: an HTTP/2 answer is several small writes (headers, data, trailers), and
        // the second waited for the peer's delayed ACK: 40 ms for each gRPC call.
        let _ = tcp.set_nodelay(true);
        let conn = builder
            .serve_connection(TokioIo::new(tcp), TowerToHyperService::new(app.clone()))
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
    graceful.shutdown().await;
    Ok(())
}

/// Ends the server when its framework worker ends: its models cannot run any more, and the
/// runtime restarts an instance that exits.
async fn exit_with(worker: Arc<framework::Worker>) {
    let mut every = tokio::time::interval(std::time::Duration::from_millis(500));
    loop {
        every.tick().await;
        if !worker.is_alive() {
            tracing::error!("the framework worker exited: the model server stops");
            std::process::exit(1);
        }
    }
}

async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
