//! `kep-bench infer`: one model's inferences through the gateway, over KServe v2 REST (binary
//! tensor extension, HTTP/1.1) or Triton's gRPC API (raw contents, HTTP/2), from the same
//! client loop, so the two protocols are compared and not two load tools. Each connection
//! makes one call at a time; prints the inferences per second and latency percentiles.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kep_model_server::kserve::grpc::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use kep_model_server::kserve::grpc::inference::infer_parameter::ParameterChoice;
use kep_model_server::kserve::grpc::inference::model_infer_request::{
    InferInputTensor, InferRequestedOutputTensor,
};
use kep_model_server::kserve::grpc::inference::{
    InferParameter, ModelInferRequest, ModelStreamInferResponse, SystemSharedMemoryRegisterRequest,
    SystemSharedMemoryUnregisterRequest,
};
use tonic::transport::Channel;

#[derive(clap::Args)]
pub struct InferArgs {
    /// `http` (KServe v2 REST) or `grpc` (Triton's gRPC).
    #[arg(long)]
    protocol: String,
    /// http: the endpoint URL (`…/endpoints/{e}`); grpc: the gateway's `http://host:port`.
    #[arg(long)]
    url: String,
    #[arg(long)]
    key: String,
    #[arg(long)]
    model: String,
    /// The model's one input: its name, KServe datatype and shape, and a file of its raw
    /// little-endian elements.
    #[arg(long)]
    input: String,
    #[arg(long)]
    datatype: String,
    #[arg(long, value_delimiter = ',')]
    shape: Vec<i64>,
    #[arg(long)]
    data: PathBuf,
    /// The output asked for (binary over REST).
    #[arg(long)]
    output: String,
    #[arg(long, default_value_t = 1)]
    connections: usize,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    #[arg(long, default_value_t = 2)]
    warmup_seconds: u64,
    /// The input in system shared memory (Triton's extension): written once to a POSIX
    /// shared memory object, registered (on every instance, through the gateway), and named
    /// by each call instead of carried; as `perf_analyzer --shared-memory system` does for
    /// inputs. The endpoint's instances must allow it (`serving.allow_client_shm`).
    #[arg(long)]
    shared_memory: bool,
    /// grpc: the calls on one `ModelStreamInfer` stream per connection (tritonclient's
    /// `async_stream_infer`, `perf_analyzer --streaming`), each answer awaited before the
    /// next request, rather than one `ModelInfer` call each.
    #[arg(long)]
    stream: bool,
}

/// The shared memory region of `--shared-memory`, named as its object's key is.
fn region() -> String {
    format!("kep-bench-{}", std::process::id())
}

/// One connection's way of making a call.
enum Caller {
    Http {
        client: reqwest::Client,
        url: String,
        body: bytes::Bytes,
        header_length: String,
    },
    Grpc(GrpcInferenceServiceClient<Channel>),
    GrpcStream {
        requests: tokio::sync::mpsc::Sender<ModelInferRequest>,
        answers: tonic::Streaming<ModelStreamInferResponse>,
    },
}

impl Caller {
    async fn connect(args: &InferArgs, raw: &[u8]) -> anyhow::Result<Caller> {
        match args.protocol.as_str() {
            "http" => {
                let parameters = if args.shared_memory {
                    serde_json::json!({"shared_memory_region": region(),
                                       "shared_memory_byte_size": raw.len()})
                } else {
                    serde_json::json!({"binary_data_size": raw.len()})
                };
                let head = serde_json::json!({
                    "inputs": [{"name": args.input, "datatype": args.datatype, "shape": args.shape,
                                "parameters": parameters}],
                    "outputs": [{"name": args.output, "parameters": {"binary_data": true}}],
                })
                .to_string();
                let mut body = head.clone().into_bytes();
                if !args.shared_memory {
                    body.extend_from_slice(raw);
                }
                Ok(Caller::Http {
                    // One kept-alive connection per caller.
                    client: reqwest::Client::builder()
                        .pool_max_idle_per_host(1)
                        .build()?,
                    url: format!("{}/v2/models/{}/infer", args.url, args.model),
                    body: body.into(),
                    header_length: head.len().to_string(),
                })
            }
            "grpc" => {
                let channel = Channel::from_shared(args.url.clone())?.connect().await?;
                let mut client = GrpcInferenceServiceClient::new(channel)
                    .max_decoding_message_size(64 * 1024 * 1024);
                if !args.stream {
                    return Ok(Caller::Grpc(client));
                }
                let (requests, queued) = tokio::sync::mpsc::channel(1);
                let queued = tonic::codegen::tokio_stream::wrappers::ReceiverStream::new(queued);
                let answers = client
                    .model_stream_infer(authorized(&args.key, queued)?)
                    .await?
                    .into_inner();
                Ok(Caller::GrpcStream { requests, answers })
            }
            other => bail!("--protocol {other}: http or grpc"),
        }
    }

    async fn call(&mut self, args: &InferArgs, raw: &[u8]) -> anyhow::Result<()> {
        match self {
            Caller::Http {
                client,
                url,
                body,
                header_length,
            } => {
                let res = client
                    .post(url.as_str())
                    .bearer_auth(&args.key)
                    .header("Inference-Header-Content-Length", header_length.as_str())
                    .body(body.clone())
                    .send()
                    .await?;
                let status = res.status();
                let answer = res.bytes().await?;
                if !status.is_success() {
                    bail!("HTTP {status}: {}", String::from_utf8_lossy(&answer));
                }
            }
            Caller::Grpc(client) => {
                let req = authorized(&args.key, grpc_request(args, raw))?;
                let answer = client.model_infer(req).await?.into_inner();
                if answer.raw_output_contents.is_empty() {
                    bail!("an answer with no output");
                }
            }
            Caller::GrpcStream { requests, answers } => {
                requests.send(grpc_request(args, raw)).await?;
                let answer = answers.message().await?.context("the stream ended")?;
                if !answer.error_message.is_empty() {
                    bail!("{}", answer.error_message);
                }
                if answer
                    .infer_response
                    .is_none_or(|a| a.raw_output_contents.is_empty())
                {
                    bail!("an answer with no output");
                }
            }
        }
        Ok(())
    }
}

/// The gRPC request of every call: the input carried in `raw_input_contents`, or named in
/// shared memory.
fn grpc_request(args: &InferArgs, raw: &[u8]) -> ModelInferRequest {
    let (parameters, raw_input_contents) = if args.shared_memory {
        let parameter = |choice| InferParameter {
            parameter_choice: Some(choice),
        };
        let parameters = HashMap::from([
            (
                "shared_memory_region".to_owned(),
                parameter(ParameterChoice::StringParam(region())),
            ),
            (
                "shared_memory_byte_size".to_owned(),
                parameter(ParameterChoice::Int64Param(raw.len() as i64)),
            ),
        ]);
        (parameters, vec![])
    } else {
        (HashMap::new(), vec![bytes::Bytes::copy_from_slice(raw)])
    };
    ModelInferRequest {
        model_name: args.model.clone(),
        inputs: vec![InferInputTensor {
            name: args.input.clone(),
            datatype: args.datatype.clone(),
            shape: args.shape.clone(),
            parameters,
            ..Default::default()
        }],
        outputs: vec![InferRequestedOutputTensor {
            name: args.output.clone(),
            ..Default::default()
        }],
        raw_input_contents,
        ..Default::default()
    }
}

/// A gRPC request with the endpoint key in its `authorization` metadata.
fn authorized<T>(key: &str, message: T) -> anyhow::Result<tonic::Request<T>> {
    let mut req = tonic::Request::new(message);
    req.metadata_mut()
        .insert("authorization", format!("Bearer {key}").parse()?);
    Ok(req)
}

/// Writes the input to a new shared memory object and registers it as [`region`]; or,
/// with `raw` `None`, unregisters it and removes the object.
async fn shared_memory(args: &InferArgs, raw: Option<&[u8]>) -> anyhow::Result<()> {
    let (name, object) = (region(), format!("/dev/shm/{}", region()));
    if let Some(raw) = raw {
        std::fs::write(&object, raw).context("writing /dev/shm")?;
    } else {
        std::fs::remove_file(&object)?;
    }
    let byte_size = raw.map_or(0, <[u8]>::len) as u64;
    if args.protocol == "grpc" {
        let channel = Channel::from_shared(args.url.clone())?.connect().await?;
        let mut client = GrpcInferenceServiceClient::new(channel);
        match raw {
            Some(_) => {
                let key = format!("/{name}");
                let message = SystemSharedMemoryRegisterRequest {
                    name,
                    key,
                    offset: 0,
                    byte_size,
                };
                client
                    .system_shared_memory_register(authorized(&args.key, message)?)
                    .await?;
            }
            None => {
                let message = SystemSharedMemoryUnregisterRequest { name };
                client
                    .system_shared_memory_unregister(authorized(&args.key, message)?)
                    .await?;
            }
        }
        return Ok(());
    }
    let action = if raw.is_some() {
        "register"
    } else {
        "unregister"
    };
    let res = reqwest::Client::new()
        .post(format!(
            "{}/v2/systemsharedmemory/region/{name}/{action}",
            args.url
        ))
        .bearer_auth(&args.key)
        .json(&serde_json::json!({"key": format!("/{name}"), "byte_size": byte_size}))
        .send()
        .await?;
    if !res.status().is_success() {
        bail!("shared memory {action}: {}", res.text().await?);
    }
    Ok(())
}

pub async fn run(args: InferArgs) -> anyhow::Result<()> {
    let raw = std::fs::read(&args.data).with_context(|| format!("{:?}", args.data))?;
    let args = std::sync::Arc::new(args);
    if !args.shared_memory {
        return measure(args, raw).await;
    }
    shared_memory(&args, Some(&raw)).await?;
    let result = measure(std::sync::Arc::clone(&args), raw).await;
    shared_memory(&args, None).await?;
    result
}

async fn measure(args: std::sync::Arc<InferArgs>, raw: Vec<u8>) -> anyhow::Result<()> {
    let raw: std::sync::Arc<[u8]> = raw.into();
    let start = Instant::now() + Duration::from_secs(args.warmup_seconds);
    let end = start + Duration::from_secs(args.seconds);
    let mut tasks = Vec::new();
    for _ in 0..args.connections {
        let (args, raw) = (std::sync::Arc::clone(&args), std::sync::Arc::clone(&raw));
        tasks.push(tokio::spawn(async move {
            let mut caller = Caller::connect(&args, &raw).await?;
            let mut took = Vec::new();
            loop {
                let t = Instant::now();
                if t >= end {
                    return anyhow::Ok(took);
                }
                caller.call(&args, &raw).await?;
                // Calls of the warm-up are made, not counted.
                if t >= start {
                    took.push(t.elapsed());
                }
            }
        }));
    }
    let mut took = Vec::new();
    for task in tasks {
        took.extend(task.await??);
    }
    took.sort();
    let quantile = |q: f64| {
        let i = ((took.len() as f64 * q).ceil() as usize).clamp(1, took.len().max(1)) - 1;
        took.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "{}",
        serde_json::json!({
            "protocol": args.protocol,
            "shared_memory": args.shared_memory,
            "stream": args.stream,
            "connections": args.connections,
            "inferences_per_s": took.len() as f64 / args.seconds as f64,
            "p50_ms": quantile(0.50),
            "p99_ms": quantile(0.99),
        })
    );
    Ok(())
}
