//! The KServe v2 / Open Inference Protocol over HTTP, with Triton's binary tensor data
//! extension (`Inference-Header-Content-Length`), which `tritonclient` uses by default.

mod body;
pub mod classification;
pub mod config;
mod extensions;
pub mod grpc;
pub mod settings;
mod shared_memory;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::compression::Encoding;
use crate::model::{DataType, Input, InputError, ModelError, Place, TensorSpec};
use crate::shm::{SharedMemory, Slot};
use crate::stats::Clock;
use crate::tensor::{self, Data};
use crate::{Failure, Served, Version};
use body::InferBody;

const HEADER_LENGTH: &str = "inference-header-content-length";

pub fn router(served: Arc<Served>) -> Router {
    Router::new()
        .route("/v2/health/live", get(|| async { StatusCode::OK }))
        // The port opens once the model is loaded: listening is being ready.
        .route("/v2/health/ready", get(|| async { StatusCode::OK }))
        .route("/v2", get(server_metadata))
        .route("/v2/models/{m}", get(model_metadata))
        .route("/v2/models/{m}/versions/{v}", get(model_metadata_version))
        .route("/v2/models/{m}/ready", get(model_ready))
        .route(
            "/v2/models/{m}/versions/{v}/ready",
            get(model_ready_version),
        )
        .route("/v2/models/{m}/infer", post(infer))
        .route("/v2/models/{m}/versions/{v}/infer", post(infer_version))
        .merge(extensions::router())
        .merge(shared_memory::router())
        // Triton's answers to a path or a method it does not serve.
        .fallback(|| async { Failure::not_found("Not Found") })
        .method_not_allowed_fallback(|| async { Failure::method_not_allowed() })
        .with_state(served)
}

/// The server's name in its metadata, REST and gRPC: Triton's clients and tools look for it.
pub const SERVER_NAME: &str = "triton";
/// The server's version in its metadata: kep's own.
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");
/// The protocol extensions served, by Triton's names, REST and gRPC alike.
pub const EXTENSIONS: &[&str] = &[
    "classification",
    "model_repository",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
    "system_shared_memory",
];

async fn server_metadata() -> Json<Value> {
    Json(json!({
        "name": SERVER_NAME,
        "version": SERVER_VERSION,
        "extensions": EXTENSIONS,
    }))
}

/// The version the path names (the latest when it names none) of the served model,
/// loaded, or Triton's words for what is missing.
pub fn find<'s>(
    served: &'s Served,
    name: &str,
    version: Option<&str>,
) -> Result<&'s Version, Failure> {
    let unknown = |what: String| Failure::not_found(format!("Request for unknown model: {what}"));
    if name != served.name {
        return Err(unknown(format!("'{name}' is not found")));
    }
    if !served.is_loaded() {
        return Err(unknown(format!("'{name}' has no available versions")));
    }
    let number = match version {
        None | Some("") => None,
        Some(v) => Some(
            v.parse::<i64>()
                .map_err(|_| unknown(format!("'{name}' version {v} is not found")))?,
        ),
    };
    served.version(number).ok_or_else(|| {
        unknown(format!(
            "'{name}' version {} is not found",
            version.unwrap_or_default()
        ))
    })
}

/// The loaded versions' numbers, as the protocol writes them.
pub fn version_names(served: &Served) -> Vec<String> {
    served
        .versions
        .iter()
        .map(|v| v.number.to_string())
        .collect()
}

/// A request's failure to fit the model, as Triton words it.
pub fn model_failure(served: &Served, model: &crate::Model, e: ModelError) -> Failure {
    let m = &served.name;
    let list = |names: &[String]| {
        let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
        format!("[{}]", quoted.join(","))
    };
    let dims = |d: &[String]| format!("[{}]", d.join(","));
    match e {
        ModelError::BadInput(InputError::Missing { given, missing }) => {
            Failure::bad_request(format!(
                "expected {} inputs but got {} inputs for model '{m}'. Got input(s) {}, but missing required input(s) {}. Please provide all required input(s).",
                model.inputs.len(),
                given.len(),
                list(&given),
                list(&missing)
            ))
        }
        ModelError::BadInput(InputError::Unexpected { name, .. }) => Failure::bad_request(format!(
            "unexpected inference input '{name}' for model '{m}'"
        )),
        ModelError::BadInput(InputError::DataType { name, given, want }) => {
            Failure::bad_request(format!(
                "inference input '{name}' data-type is '{}', but model '{m}' expects '{}'",
                given.map_or("INVALID", DataType::name),
                want.name()
            ))
        }
        ModelError::BadInput(InputError::Shape { name, given, want }) => {
            Failure::bad_request(format!(
                "unexpected shape for input '{name}' for model '{m}'. Expected {}, got {}. ",
                dims(&want.iter().map(i64::to_string).collect::<Vec<_>>()),
                dims(&given.iter().map(usize::to_string).collect::<Vec<_>>())
            ))
        }
        ModelError::BadInput(InputError::BatchSize { max, .. }) => Failure::bad_request(format!(
            "inference request batch-size must be <= {max} for '{m}'"
        )),
        ModelError::BadInput(InputError::BatchDimensions { sizes }) => {
            let first = sizes.first().map_or(0, |(_, s)| *s);
            let name = (sizes.iter().find(|(_, s)| *s != first)).map_or("", |(n, _)| n.as_str());
            Failure::bad_request(format!(
                "input '{name}' batch size does not match other inputs for '{m}'"
            ))
        }
        other => Failure::from(other),
    }
}

#[derive(Serialize)]
struct MetadataTensor<'a> {
    name: &'a str,
    datatype: &'static str,
    shape: &'a [i64],
}

fn metadata_tensors(specs: &[TensorSpec]) -> Vec<MetadataTensor<'_>> {
    specs
        .iter()
        .map(|s| MetadataTensor {
            name: &s.name,
            datatype: s.datatype.name(),
            shape: &s.shape,
        })
        .collect()
}

async fn model_metadata(
    State(s): State<Arc<Served>>,
    Path(m): Path<String>,
) -> Result<Response, Failure> {
    metadata(&s, &m, None)
}

async fn model_metadata_version(
    State(s): State<Arc<Served>>,
    Path((m, v)): Path<(String, String)>,
) -> Result<Response, Failure> {
    metadata(&s, &m, Some(&v))
}

fn metadata(s: &Served, m: &str, v: Option<&str>) -> Result<Response, Failure> {
    let model = find(s, m, v)?.model();
    Ok(Json(json!({
        "name": s.name,
        "versions": version_names(s),
        "platform": config::platform(model).0,
        "inputs": metadata_tensors(&model.inputs),
        "outputs": metadata_tensors(&model.outputs),
    }))
    .into_response())
}

async fn model_ready(
    State(s): State<Arc<Served>>,
    Path(m): Path<String>,
) -> Result<StatusCode, Failure> {
    ready(&s, &m, None)
}

async fn model_ready_version(
    State(s): State<Arc<Served>>,
    Path((m, v)): Path<(String, String)>,
) -> Result<StatusCode, Failure> {
    ready(&s, &m, Some(&v))
}

/// An unloaded model is there but not ready: Triton's 400, not the 404 of an unknown one.
fn ready(s: &Served, m: &str, v: Option<&str>) -> Result<StatusCode, Failure> {
    if m == s.name && !s.is_loaded() {
        return Err(Failure::bad_request("Model version not ready"));
    }
    find(s, m, v).map(|_| StatusCode::OK)
}

#[derive(Deserialize)]
struct InferRequest {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    parameters: Map<String, Value>,
    inputs: Vec<InputTensor>,
    #[serde(default)]
    outputs: Option<Vec<RequestedOutput>>,
}

#[derive(Deserialize)]
struct InputTensor {
    name: String,
    shape: Vec<i64>,
    datatype: String,
    #[serde(default)]
    parameters: Map<String, Value>,
    #[serde(default)]
    data: Option<Value>,
}

#[derive(Deserialize)]
struct RequestedOutput {
    name: String,
    #[serde(default)]
    parameters: Map<String, Value>,
}

/// An output to answer: the model's output `output`, as binary data or JSON, and replaced by
/// its top `classification` classes when asked (the classification extension), or written
/// to a client's shared memory `slot` instead (the shared memory extension).
#[derive(Clone)]
pub struct Wanted {
    pub output: usize,
    pub binary: bool,
    pub classification: Option<usize>,
    pub shared: Option<Slot>,
}

/// Serialized as it is, not through `Value`, so FP32 data keeps its shortest digits.
#[derive(Serialize)]
struct InferResponse<'a> {
    model_name: &'a str,
    model_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    outputs: Vec<OutputTensor>,
}

#[derive(Serialize)]
struct OutputTensor {
    name: String,
    datatype: &'static str,
    shape: Vec<usize>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    parameters: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<Data>,
}

async fn infer(
    State(s): State<Arc<Served>>,
    Path(m): Path<String>,
    headers: HeaderMap,
    InferBody(body): InferBody,
) -> Result<Response, Failure> {
    let version = find(&s, &m, None)?;
    counted(&s, version, &headers, &body).await
}

async fn infer_version(
    State(s): State<Arc<Served>>,
    Path((m, v)): Path<(String, String)>,
    headers: HeaderMap,
    InferBody(body): InferBody,
) -> Result<Response, Failure> {
    let version = find(&s, &m, Some(&v))?;
    counted(&s, version, &headers, &body).await
}

/// An inference of the served model, counted in its statistics whatever its outcome.
async fn counted(
    s: &Served,
    version: &Version,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, Failure> {
    let mut clock = Clock::start();
    let answer = answer(s, version, &mut clock, headers, body).await;
    s.stats.record(&clock, answer.is_ok());
    answer
}

fn flag(parameters: &Map<String, Value>, name: &str) -> Option<bool> {
    parameters.get(name).and_then(Value::as_bool)
}

/// An inference request read, before the model runs: its `id`, its named input tensors, and
/// the outputs to answer.
pub struct Decoded {
    pub id: Option<String>,
    pub inputs: Vec<(String, Input)>,
    pub wanted: Vec<Wanted>,
}

/// Where the output `name` of `model` is among its `outputs`, REST and gRPC alike.
pub fn output_index(outputs: &[TensorSpec], model: &str, name: &str) -> Result<usize, Failure> {
    outputs.iter().position(|o| o.name == name).ok_or_else(|| {
        Failure::bad_request(format!(
            "unexpected inference output '{name}' for model '{model}'"
        ))
    })
}

/// An input's datatype and shape as a request declares them, REST and gRPC alike.
pub fn input_type(
    name: &str,
    datatype: &str,
    shape: &[i64],
) -> Result<(DataType, Vec<usize>), Failure> {
    let at = |msg: String| Failure::bad_request(format!("input {name}: {msg}"));
    let datatype =
        DataType::parse(datatype).ok_or_else(|| at(format!("unknown datatype {datatype}")))?;
    let shape = shape
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| at(format!("shape {shape:?}"))))
        .collect::<Result<Vec<usize>, _>>()?;
    Ok((datatype, shape))
}

/// Reads an inference request's body against the outputs of `model`; `header_length` is the
/// `Inference-Header-Content-Length` of the binary extension, when sent; `shm` holds the
/// regions that tensors in shared memory name.
pub fn decode(
    model: &str,
    outputs: &[TensorSpec],
    shm: &SharedMemory,
    header_length: Option<&HeaderValue>,
    body: &Bytes,
) -> Result<Decoded, Failure> {
    // With the binary extension the JSON header comes first, the tensors' bytes after it.
    let (head, mut binary) = match header_length {
        Some(v) => {
            let n = body::length(Some(v))
                .filter(|n| *n <= body.len())
                .ok_or_else(|| {
                    Failure::bad_request(format!(
                        "Inference-Header-Content-Length is not a length within the body's {} bytes",
                        body.len()
                    ))
                })?;
            (&body[..n], body.slice(n..))
        }
        None => (&body[..], Bytes::new()),
    };
    let req: InferRequest = serde_json::from_slice(head).map_err(|e| {
        Failure::bad_request(format!("the request is not an inference request: {e}"))
    })?;

    let mut inputs = Vec::with_capacity(req.inputs.len());
    for input in &req.inputs {
        let at = |msg: String| Failure::bad_request(format!("input {}: {msg}", input.name));
        let (datatype, shape) = input_type(&input.name, &input.datatype, &input.shape)?;
        let shared = shared_memory(&input.parameters)?;
        let tensor = match (
            input.parameters.get("binary_data_size"),
            &input.data,
            shared,
        ) {
            (Some(size), None, None) => {
                let size = size
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|n| *n <= binary.len())
                    .ok_or_else(|| at("binary_data_size runs past the body".into()))?;
                let mine = binary.split_to(size);
                tensor::in_place(datatype, &shape, Place::Body(mine))
            }
            (None, Some(data), None) => {
                // `data` may be flat or nested: its leaves fill the declared shape in order.
                let (_, leaves) = tensor::flatten(data).map_err(at)?;
                tensor::from_json(datatype, &shape, &leaves, false).map(Input::Tensor)
            }
            (None, None, Some((region, offset, size))) => tensor::in_place(
                datatype,
                &shape,
                Place::Slot(shm.slot(region, offset, size)?),
            ),
            (binary, data, shared) => {
                return Err(one_content(
                    binary.is_some(),
                    data.is_some(),
                    shared.is_some(),
                ));
            }
        }
        .map_err(at)?;
        inputs.push((input.name.clone(), tensor));
    }
    if !binary.is_empty() {
        return Err(Failure::bad_request(format!(
            "{} bytes of binary data belong to no input",
            binary.len()
        )));
    }

    // Only the requested outputs, each as JSON or binary as asked.
    let all_binary = flag(&req.parameters, "binary_data_output").unwrap_or(false);
    let wanted: Vec<Wanted> = match &req.outputs {
        None => (0..outputs.len())
            .map(|output| Wanted {
                output,
                binary: all_binary,
                classification: None,
                shared: None,
            })
            .collect(),
        Some(requested) => requested
            .iter()
            .map(|r| {
                let output = output_index(outputs, model, &r.name)?;
                let classification = match r.parameters.get("classification") {
                    None => None,
                    Some(k) => Some(
                        k.as_u64()
                            .and_then(|k| usize::try_from(k).ok())
                            .ok_or_else(|| {
                                Failure::bad_request(format!(
                                    "output '{}': classification must be a count of classes",
                                    r.name
                                ))
                            })?,
                    ),
                };
                let binary = flag(&r.parameters, "binary_data");
                let shared = match shared_memory(&r.parameters)? {
                    None => None,
                    Some(_) if classification.is_some() => {
                        return Err(Failure::bad_request(
                            "Output can't set both 'shared_memory_region' and 'classification'",
                        ));
                    }
                    Some(_) if binary == Some(true) => {
                        return Err(Failure::bad_request(
                            "Output can't set both 'shared_memory_region' and 'binary_data'",
                        ));
                    }
                    Some((region, offset, size)) => Some(shm.slot(region, offset, size)?),
                };
                Ok(Wanted {
                    output,
                    binary: binary.unwrap_or(all_binary),
                    classification,
                    shared,
                })
            })
            .collect::<Result<_, Failure>>()?,
    };
    Ok(Decoded {
        id: req.id,
        inputs,
        wanted,
    })
}

/// An input's or a requested output's shared memory parameters, when it names a region:
/// the region, the offset (0 unless given) and the byte size (0 unless given), as Triton
/// reads them.
fn shared_memory(parameters: &Map<String, Value>) -> Result<Option<(&str, u64, u64)>, Failure> {
    let Some(region) = parameters.get("shared_memory_region") else {
        return Ok(None);
    };
    let unparsed = |name: &str| Failure::bad_request(format!("Unable to parse '{name}'"));
    let region = region
        .as_str()
        .ok_or_else(|| unparsed("shared_memory_region"))?;
    let number = |name: &str| match parameters.get(name) {
        None => Ok(0),
        Some(v) => v.as_u64().ok_or_else(|| unparsed(name)),
    };
    Ok(Some((
        region,
        number("shared_memory_offset")?,
        number("shared_memory_byte_size")?,
    )))
}

/// Triton's words for an input with more or fewer than one of its three kinds of content.
fn one_content(binary: bool, data: bool, shared: bool) -> Failure {
    let set: Vec<&str> = [
        (data, " 'data'"),
        (binary, " 'binary_data_size'"),
        (shared, " 'shared_memory_region'"),
    ]
    .into_iter()
    .filter_map(|(set, name)| set.then_some(name))
    .collect();
    Failure::bad_request(format!(
        "Input must set only one of the following fields: 'data', 'binary_data_size' in \
         'parameters', 'shared_memory_region' in 'parameters'. But{}",
        if set.is_empty() {
            " no field is set".to_owned()
        } else {
            format!(" set{}", set.concat())
        }
    ))
}

async fn answer(
    s: &Served,
    version: &Version,
    clock: &mut Clock,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, Failure> {
    let model = version.model();
    let Decoded { id, inputs, wanted } = decode(
        &s.name,
        &model.outputs,
        &s.shared_memory,
        headers.get(HEADER_LENGTH),
        body,
    )?;
    let results = s
        .run(model, clock, inputs)
        .await
        .map_err(|e| model_failure(s, model, e))?;

    let mut outputs = Vec::with_capacity(wanted.len());
    let mut blobs = Vec::new();
    for w in wanted {
        let spec = &model.outputs[w.output];
        let classified;
        let t = match w.classification {
            Some(k) => {
                classified = classification::top(&results[w.output], k)?;
                &classified
            }
            None => &results[w.output],
        };
        let datatype = DataType::of(t.datum_type()).unwrap_or(spec.datatype);
        let mut out = OutputTensor {
            name: spec.name.clone(),
            datatype: datatype.name(),
            shape: t.shape().to_vec(),
            parameters: Map::new(),
            data: None,
        };
        if let Some(slot) = &w.shared {
            // Written where the client asked; the answer says only its type and shape.
            let bytes = tensor::to_bytes(t, datatype).map_err(Failure::bad_request)?;
            slot.write(&spec.name, &bytes)?;
        } else if w.binary {
            let bytes = tensor::to_bytes(t, datatype).map_err(Failure::bad_request)?;
            out.parameters
                .insert("binary_data_size".into(), Value::from(bytes.len()));
            blobs.push(bytes);
        } else {
            out.data = Some(tensor::to_data(t, datatype).map_err(Failure::bad_request)?);
        }
        outputs.push(out);
    }
    let doc = InferResponse {
        model_name: &s.name,
        model_version: version.number.to_string(),
        id,
        outputs,
    };
    let json = serde_json::to_vec(&doc).map_err(|e| Failure::bad_request(e.to_string()))?;
    let head_length = (!blobs.is_empty()).then(|| HeaderValue::from(json.len()));
    let mut body = json;
    blobs.iter().for_each(|b| body.extend_from_slice(b));
    let encoding = Encoding::for_answer(headers);
    let mut answer = encoding.compress(body).into_response();
    let h = answer.headers_mut();
    let content_type = match head_length {
        Some(n) => {
            h.insert(HEADER_LENGTH, n);
            "application/octet-stream"
        }
        None => "application/json",
    };
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Some(name) = encoding.name() {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static(name));
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(body: &[u8]) -> StatusCode {
        match decode(
            "m",
            &[],
            &SharedMemory::new(false),
            None,
            &Bytes::copy_from_slice(body),
        ) {
            Ok(_) => StatusCode::OK,
            Err(e) => e.into_response().status(),
        }
    }

    /// Found writing the `kserve_request` fuzz target: a shape's element count overflowed
    /// (a panic where overflow is checked), and BYTES binary data reserved room for as many
    /// elements as the shape said (the process aborted, out of memory). Found by
    /// `kserve_grpc_request`: an empty shape whose other dimensions overflow the engine's
    /// strides (a panic in tract).
    #[test]
    fn shapes_past_memory_are_a_bad_request() {
        for body in [
            r#"{"inputs":[{"name":"bytes","shape":[4294967296,4294967296],"datatype":"BYTES","data":[]}]}"#,
            r#"{"inputs":[{"name":"bytes","shape":[4294967296,4294967296],"datatype":"BYTES","parameters":{"binary_data_size":0}}]}"#,
            r#"{"inputs":[{"name":"bytes","shape":[1000000000000],"datatype":"BYTES","parameters":{"binary_data_size":0}}]}"#,
            // Empty, yet its strides overflow (found by `kserve_grpc_request`).
            r#"{"inputs":[{"name":"int64","shape":[1,2,1407,5,109,26,5,868235,16383,0,0],"datatype":"INT64","data":[]}]}"#,
            r#"{"inputs":[{"name":"fp32","shape":[4294967296,4294967296,0],"datatype":"FP32","parameters":{"binary_data_size":0}}]}"#,
        ] {
            assert_eq!(status(body.as_bytes()), StatusCode::BAD_REQUEST, "{body}");
        }
    }
}
