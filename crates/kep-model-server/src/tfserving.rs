//! The TensorFlow Serving REST API as TF Serving answers it: model status, metadata,
//! `:predict` (row and columnar), `:classify` and `:regress`, with its paths, error texts
//! and status codes (`model_servers/http_rest_api_handler.cc` and `http_rest_api_util.cc`
//! in tensorflow/serving).

mod examples;
pub mod grpc;
mod json;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method as HttpMethod, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::{Value, json};

pub use examples::Method;
pub use json::{Format, decode};

use crate::compression;
use crate::model::TensorSpec;
use crate::stats::Clock;
use crate::{Failure, Served, Version};

/// Every path goes to one handler, which reads it as TF Serving's regular expressions do:
/// `{m}:predict` is one segment, the words are matched in any case, and the query is part
/// of the path.
pub fn router(served: Arc<Served>) -> Router {
    Router::new().fallback(handle).with_state(served)
}

async fn handle(
    State(served): State<Arc<Served>>,
    method: HttpMethod,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    // TF Serving's dispatcher takes `(?i)/v1/.*`; libevent answers anything else 404.
    if !path
        .get(..4)
        .is_some_and(|p| p.eq_ignore_ascii_case("/v1/"))
    {
        return Failure::not_found("Not Found").into_response();
    }
    if method == HttpMethod::OPTIONS {
        // A CORS preflight (`http_server.cc`): fine with an http(s) Origin.
        let origin = headers
            .get("origin")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        return if origin.contains("http://") || origin.contains("https://") {
            StatusCode::OK.into_response()
        } else {
            Failure::bad_request("Origin header is missing in CORS preflight").into_response()
        };
    }
    let body = compression::tf_serving_body(&headers, body);
    match answer(&served, method.as_str(), path, &body).await {
        Ok(v) => Json(v).into_response(),
        Err(failure) => failure.into_response(),
    }
}

/// What a path names: a model, and a version or a label.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    model: String,
    version: Option<i64>,
    label: Option<String>,
}

/// The call a request makes (`ProcessRequest`).
#[derive(Debug, PartialEq, Eq)]
enum Call {
    Status(Target),
    Metadata(Target),
    Predict(Target),
    Classify(Target),
    Regress(Target),
}

/// `ParseModelInfo`: `kPredictionApiGegex` for POST, `kModelStatusApiRegex` for GET;
/// what neither matches, and a verb not in lower case, is a malformed request.
fn route(method: &str, path: &str) -> Result<Call, Failure> {
    let malformed = || Failure::bad_request(format!("Malformed request: {method} {path}"));
    let parsed = match method {
        "POST" => prediction_path(path),
        "GET" => status_path(path),
        _ => None,
    };
    let Some((model, version, label, word)) = parsed else {
        return Err(malformed());
    };
    let version = version
        .map(|v| {
            v.parse::<i64>().map_err(|_| {
                Failure::bad_request(format!("Failed to convert version: {v} to numeric."))
            })
        })
        .transpose()?;
    let target = Target {
        model: percent_decoded(model),
        version,
        label: label.map(percent_decoded),
    };
    Ok(match (method, word) {
        ("POST", "predict") => Call::Predict(target),
        ("POST", "classify") => Call::Classify(target),
        ("POST", "regress") => Call::Regress(target),
        ("POST", _) => return Err(malformed()),
        (_, "metadata") => Call::Metadata(target),
        _ => Call::Status(target),
    })
}

type Parsed<'a> = (&'a str, Option<&'a str>, Option<&'a str>, &'a str);

fn strip_word<'a>(s: &'a str, word: &str) -> Option<&'a str> {
    let head = s.get(..word.len())?;
    head.eq_ignore_ascii_case(word).then(|| &s[word.len()..])
}

/// `[^/:]+`
fn is_name(s: &str) -> bool {
    !s.is_empty() && !s.contains(['/', ':'])
}

/// `(?i)/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)`
fn prediction_path(path: &str) -> Option<Parsed<'_>> {
    let rest = strip_word(path, "/v1/models/")?;
    let (head, verb) = rest.rsplit_once(':')?;
    if !["classify", "regress", "predict"]
        .iter()
        .any(|w| w.eq_ignore_ascii_case(verb))
    {
        return None;
    }
    let (model, choice) = head
        .split_once('/')
        .map_or((head, None), |(m, c)| (m, Some(c)));
    if !is_name(model) {
        return None;
    }
    let (version, label) = match choice.map(|c| c.split_once('/')) {
        None => (None, None),
        Some(Some((word, v)))
            if word.eq_ignore_ascii_case("versions")
                && !v.is_empty()
                && v.bytes().all(|b| b.is_ascii_digit()) =>
        {
            (Some(v), None)
        }
        Some(Some((word, l))) if word.eq_ignore_ascii_case("labels") && is_name(l) => {
            (None, Some(l))
        }
        Some(_) => return None,
    };
    Some((model, version, label, verb))
}

/// `(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))` at the start of `s`: the version or the
/// label, and what follows.
fn version_or_label(s: &str) -> Option<(Option<&str>, Option<&str>, &str)> {
    if let Some(rest) = strip_word(s, "/versions/") {
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if end > 0 {
            return Some((Some(&rest[..end]), None, &rest[end..]));
        }
    }
    if let Some(rest) = strip_word(s, "/labels/") {
        let end = rest.find(['/', ':']).unwrap_or(rest.len());
        if end > 0 {
            return Some((None, Some(&rest[..end]), &rest[end..]));
        }
    }
    None
}

/// `(?i)/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:\/(metadata))?`,
/// its optional parts tried present first, as RE2 tries them.
fn status_path(path: &str) -> Option<Parsed<'_>> {
    let rest = strip_word(path, "/v1/models")?;
    let with_model = rest.strip_prefix('/').map(|r| {
        let end = r.find(['/', ':']).unwrap_or(r.len());
        (&r[..end], &r[end..])
    });
    let models = with_model
        .filter(|(m, _)| is_name(m))
        .into_iter()
        .chain([("", rest)]);
    for (model, rest) in models {
        let choices = version_or_label(rest)
            .into_iter()
            .chain([(None, None, rest)]);
        for (version, label, rest) in choices {
            let metadata = rest
                .strip_prefix('/')
                .filter(|m| m.eq_ignore_ascii_case("metadata"));
            if let Some(word) = metadata {
                return Some((model, version, label, word));
            }
            if rest.is_empty() {
                return Some((model, version, label, ""));
            }
        }
    }
    None
}

/// `DecodeArg` (curl's unescape): `%XX` decoded, anything else kept.
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn answer(
    served: &Arc<Served>,
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<Value, Failure> {
    match route(method, path)? {
        Call::Status(t) => status(served, &t),
        Call::Metadata(t) => metadata(served, &t),
        Call::Predict(t) => predict(served, &t, body).await,
        Call::Classify(t) => classify_or_regress(served, &t, body, false).await,
        Call::Regress(t) => classify_or_regress(served, &t, body, true).await,
    }
}

/// `GetModelStatusImpl` (`model_servers/get_model_status_impl.cc`): a label is not read,
/// so the status is the version's asked for, or every loaded version's.
fn status(served: &Served, t: &Target) -> Result<Value, Failure> {
    if t.model.is_empty() {
        return Err(Failure::bad_request("Missing model name in request."));
    }
    let statuses: Vec<Value> = versions(served, t)?
        .iter()
        .rev()
        .map(|v| {
            json!({
                "version": v.number.to_string(),
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            })
        })
        .collect();
    Ok(json!({ "model_version_status": statuses }))
}

/// `GetModelStatusWithModelSpec`: the version asked for, or every version, that the
/// servable state monitor knows.
fn versions<'s>(served: &'s Served, t: &Target) -> Result<Vec<&'s Version>, Failure> {
    let found: Vec<&Version> = if t.model == served.name {
        (served.versions.iter())
            .filter(|v| t.version.is_none_or(|n| n == v.number))
            .collect()
    } else {
        Vec::new()
    };
    if !found.is_empty() {
        return Ok(found);
    }
    Err(Failure::not_found(match t.version {
        Some(v) => format!("Could not find version {v} of model {}", t.model),
        None => format!("Could not find any versions of model {}", t.model),
    }))
}

/// `ServerCore::GetServableHandle`: no labels are configured (`Unrecognized servable version
/// label`); the version asked for, or the latest, among those loaded.
fn servable<'s>(served: &'s Served, t: &Target) -> Result<&'s Version, Failure> {
    if let Some(label) = &t.label {
        return Err(Failure::bad_request(format!(
            "Unrecognized servable version label: {label}"
        )));
    }
    let version = (t.model == served.name)
        .then(|| served.version(t.version))
        .flatten();
    version.ok_or_else(|| {
        Failure::not_found(match t.version {
            Some(v) => format!("Servable not found for request: Specific({}, {v})", t.model),
            None => format!("Servable not found for request: Latest({})", t.model),
        })
    })
}

/// `GetModelMetadataImpl`: the version's SignatureDefs, as the gRPC side packs them.
fn metadata(served: &Served, t: &Target) -> Result<Value, Failure> {
    if t.model.is_empty() {
        return Err(Failure::bad_request("Missing model name in request."));
    }
    let version = servable(served, t)?;
    let defs: serde_json::Map<String, Value> = grpc::signature_defs(version)
        .into_iter()
        .map(|(name, def)| (name, signature_def_json(&def)))
        .collect();
    Ok(json!({
        "model_spec": {"name": served.name, "signature_name": "", "version": version.number.to_string()},
        "metadata": {"signature_def": {"signature_def": defs}},
    }))
}

/// A SignatureDef in the JSON TF Serving writes it in (protobuf's JSON mapping: int64
/// sizes as strings).
fn signature_def_json(def: &grpc::tensorflow::SignatureDef) -> Value {
    use grpc::tensorflow::{DataType as Dt, tensor_info::Encoding};
    let infos = |map: &std::collections::HashMap<String, grpc::tensorflow::TensorInfo>| {
        let mut sorted: Vec<_> = map.iter().collect();
        sorted.sort_by_key(|(k, _)| k.as_str());
        let entries = sorted.into_iter().map(|(key, info)| {
            let shape = info.tensor_shape.clone().unwrap_or_default();
            let dim: Vec<Value> = (shape.dim.iter())
                .map(|d| json!({"size": d.size.to_string(), "name": d.name}))
                .collect();
            let name = match &info.encoding {
                Some(Encoding::Name(n)) => n.clone(),
                _ => String::new(),
            };
            let dtype = Dt::try_from(info.dtype).unwrap_or(Dt::DtInvalid);
            let info = json!({
                "dtype": dtype.as_str_name(),
                "tensor_shape": {"dim": dim, "unknown_rank": shape.unknown_rank},
                "name": name,
            });
            (key.clone(), info)
        });
        Value::Object(entries.collect())
    };
    json!({
        "inputs": infos(&def.inputs),
        "outputs": infos(&def.outputs),
        "method_name": def.method_name,
    })
}

/// `ProcessPredictRequest`: the body is read before the model is looked up, so a malformed
/// body is a 400 even for an unknown model.
async fn predict(served: &Arc<Served>, t: &Target, body: &[u8]) -> Result<Value, Failure> {
    let doc = json::parse(body)?;
    let signature_name = json::signature_name(&doc)?.map(str::to_owned);
    let version = servable(served, t)?;
    let model = &json::signature(version, signature_name.as_deref().unwrap_or_default())?.model;
    let (format, inputs) = json::tensors(&model.inputs, doc)?;
    let outputs = served.run(model, &mut Clock::start(), inputs).await?;
    let written = json::written(&outputs, &model.outputs)?;
    Ok(match format {
        Format::Rows => json!({"predictions": json::predictions(written)?}),
        Format::Columns => json!({"outputs": json::outputs(written)}),
    })
}

/// `ProcessClassifyRequest` and `ProcessRegressRequest`: the body, the model, then the
/// examples run as `classify` runs them.
async fn classify_or_regress(
    served: &Arc<Served>,
    t: &Target,
    body: &[u8],
    regress: bool,
) -> Result<Value, Failure> {
    let request = examples::read(body)?;
    let version = servable(served, t)?;
    let results = match run_examples(served, version, &request, regress).await? {
        Results::Classes(classes) => classes
            .into_iter()
            .map(|row| {
                let row = row
                    .into_iter()
                    .map(|(l, s)| json!([l, json::decimal_f32(s)]));
                Value::Array(row.collect())
            })
            .collect(),
        Results::Values(values) => values.into_iter().map(json::decimal_f32).collect(),
    };
    Ok(json!({ "results": Value::Array(results) }))
}

/// What `classify` or `regress` gives per example: `(label, score)` per class, or a value.
enum Results {
    Classes(Vec<Vec<(String, f32)>>),
    Values(Vec<f32>),
}

/// `RunClassify` and `RunRegress` (`servables/tensorflow/classifier.cc`, `regressor.cc`) on
/// the found model: the signature (`GetClassificationSignatureDef`,
/// `GetRegressionSignatureDef`), whose `method_name` must be the call's, as TF Serving checks
/// it with `--enable_signature_method_name_check`; then the examples, fed and run, and the
/// results checked.
async fn run_examples(
    served: &Served,
    version: &Version,
    request: &examples::Request,
    regress: bool,
) -> Result<Results, Failure> {
    let name = request.signature_name.as_deref().unwrap_or_default();
    let signature = version.signature(name).ok_or_else(|| {
        Failure::bad_request(format!("No signature was found with the name: {name}"))
    })?;
    let model = &signature.model;
    let (wanted, what) = if regress {
        ("tensorflow/serving/regress", "regression")
    } else {
        ("tensorflow/serving/classify", "classification")
    };
    if signature.method != wanted {
        return Err(Failure::bad_request(format!(
            "Expected {what} signature method_name to be {wanted}. Was: {}",
            signature.method
        )));
    }
    // `InputToSerializedExampleTensor` (`servables/tensorflow/util.cc`).
    if request.examples.is_empty() {
        return Err(Failure::bad_request("Input is empty."));
    }
    let count = request.examples.len();
    let method = Method::of(&model.inputs, &model.outputs);
    let outputs = match examples::serialized_input(model) {
        // A SavedModel's classify or regress signature takes the examples serialized.
        Some(input) => {
            let tensor = examples::serialized(request, input)?;
            served
                .run(
                    model,
                    &mut Clock::start(),
                    vec![(input.name.clone(), tensor)],
                )
                .await?
        }
        None => {
            let inputs = examples::inputs(&model.inputs, request)?;
            served.run(model, &mut Clock::start(), inputs).await?
        }
    };
    Ok(match method {
        Method::Classify { scores, classes } => {
            Results::Classes(examples::classifications(&outputs, scores, classes, count)?)
        }
        _ => Results::Values(examples::regressions(&outputs[0], count)?),
    })
}

/// `VerifyRequestInputsSize` (`servables/tensorflow/predict_util.cc`): the inputs sent, as
/// many as the signature's (which has no defaults).
fn verify_inputs_size<'a>(
    sent: impl IntoIterator<Item = &'a str>,
    specs: &[TensorSpec],
) -> Result<(), Failure> {
    let sent: std::collections::BTreeSet<&str> = sent.into_iter().collect();
    let wanted: std::collections::BTreeSet<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    if sent.len() == wanted.len() {
        return Ok(());
    }
    let join = |names: Vec<&&str>| names.into_iter().copied().collect::<Vec<_>>().join(",");
    Err(Failure::bad_request(format!(
        "input size does not match signature: {}!={} len({{{}}}) != len({{{}}}). Sent extra: \
         {{{}}}. Missing but required: {{{}}}.",
        sent.len(),
        wanted.len(),
        join(sent.iter().collect()),
        join(wanted.iter().collect()),
        join(sent.difference(&wanted).collect()),
        join(wanted.difference(&sent).collect()),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DataType;

    fn target(model: &str, version: Option<i64>, label: Option<&str>) -> Target {
        Target {
            model: model.into(),
            version,
            label: label.map(str::to_owned),
        }
    }

    fn spec(name: &str, datatype: DataType, shape: &[i64]) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            datatype,
            shape: shape.to_vec(),
        }
    }

    #[test]
    fn paths_read_as_tf_servings_expressions_read_them() {
        let ok = |method, path| route(method, path).unwrap();
        assert_eq!(
            ok("GET", "/v1/models/m"),
            Call::Status(target("m", None, None))
        );
        assert_eq!(
            ok("GET", "/V1/Models/m/VERSIONS/007"),
            Call::Status(target("m", Some(7), None))
        );
        assert_eq!(
            ok("GET", "/v1/models/m/labels/stable/metadata"),
            Call::Metadata(target("m", None, Some("stable")))
        );
        // `metadata` in another case is matched, then not taken for the word.
        assert_eq!(
            ok("GET", "/v1/models/m/METADATA"),
            Call::Status(target("m", None, None))
        );
        assert_eq!(
            ok("GET", "/v1/models"),
            Call::Status(target("", None, None))
        );
        assert_eq!(
            ok("GET", "/v1/models/versions/1"),
            Call::Status(target("", Some(1), None))
        );
        assert_eq!(
            ok("GET", "/v1/models/a%20b?x=1"),
            Call::Status(target("a b?x=1", None, None))
        );
        assert_eq!(
            ok("POST", "/v1/models/m/versions/2:predict"),
            Call::Predict(target("m", Some(2), None))
        );
        assert_eq!(
            ok("POST", "/v1/models/m/labels/canary:classify"),
            Call::Classify(target("m", None, Some("canary")))
        );
        let malformed = |method, path| route(method, path).unwrap_err().message;
        assert_eq!(
            malformed("POST", "/v1/models/m:Predict"),
            "Malformed request: POST /v1/models/m:Predict"
        );
        assert_eq!(
            malformed("POST", "/v1/models/m"),
            "Malformed request: POST /v1/models/m"
        );
        assert_eq!(
            malformed("GET", "/v1/models/m:predict"),
            "Malformed request: GET /v1/models/m:predict"
        );
        assert_eq!(
            malformed("PUT", "/v1/models/m"),
            "Malformed request: PUT /v1/models/m"
        );
        assert_eq!(
            malformed("POST", "/v1/models/m/versions/x:predict"),
            "Malformed request: POST /v1/models/m/versions/x:predict"
        );
        assert_eq!(
            malformed("GET", "/v1/models/m/versions/99999999999999999999"),
            "Failed to convert version: 99999999999999999999 to numeric."
        );
    }

    #[test]
    fn methods_follow_the_outputs_shapes() {
        let x = [spec("x", DataType::Fp32, &[-1, 4])];
        let scores = spec("probs", DataType::Fp32, &[-1, 3]);
        let classes = spec("classes", DataType::Bytes, &[-1, 3]);
        assert_eq!(
            Method::of(&x, std::slice::from_ref(&scores)),
            Method::Classify {
                scores: Some(0),
                classes: None
            }
        );
        assert_eq!(
            Method::of(&x, &[classes, scores.clone()]),
            Method::Classify {
                scores: Some(1),
                classes: Some(0)
            }
        );
        for y in [
            spec("y", DataType::Fp32, &[-1]),
            spec("y", DataType::Fp32, &[-1, 1]),
        ] {
            assert_eq!(Method::of(&x, &[y]), Method::Regress);
        }
        // An input an example cannot fill, or outputs of other shapes, only predict.
        let ragged = [spec("x", DataType::Fp32, &[-1, -1])];
        assert_eq!(
            Method::of(&ragged, std::slice::from_ref(&scores)),
            Method::Predict
        );
        assert_eq!(Method::of(&x, &[scores.clone(), scores]), Method::Predict);
        assert_eq!(
            Method::of(&x, &[spec("y", DataType::Fp32, &[-1, 2, 2])]),
            Method::Predict
        );
    }

    #[test]
    fn datatypes_have_tensorflow_names() {
        let names: Vec<&str> = DataType::ALL
            .into_iter()
            .map(|d| grpc::dtype(d).as_str_name())
            .collect();
        assert_eq!(
            names,
            [
                "DT_BOOL",
                "DT_UINT8",
                "DT_UINT16",
                "DT_UINT32",
                "DT_UINT64",
                "DT_INT8",
                "DT_INT16",
                "DT_INT32",
                "DT_INT64",
                "DT_HALF",
                "DT_FLOAT",
                "DT_DOUBLE",
                "DT_STRING",
            ]
        );
    }

    #[test]
    fn signature_defs_read_as_tf_servings_json() {
        use grpc::tensorflow::{SignatureDef, TensorInfo, TensorShapeProto, tensor_info};
        let info = TensorInfo {
            dtype: grpc::dtype(DataType::Fp32) as i32,
            tensor_shape: Some(TensorShapeProto {
                dim: [-1, 3]
                    .map(|size| grpc::tensorflow::tensor_shape_proto::Dim {
                        size,
                        name: String::new(),
                    })
                    .to_vec(),
                unknown_rank: false,
            }),
            encoding: Some(tensor_info::Encoding::Name("serving_default_x:0".into())),
        };
        let def = SignatureDef {
            inputs: [("x".to_owned(), info)].into(),
            outputs: Default::default(),
            method_name: "tensorflow/serving/predict".into(),
        };
        assert_eq!(
            signature_def_json(&def),
            json!({
                "inputs": {"x": {
                    "dtype": "DT_FLOAT",
                    "tensor_shape": {
                        "dim": [{"size": "-1", "name": ""}, {"size": "3", "name": ""}],
                        "unknown_rank": false,
                    },
                    "name": "serving_default_x:0",
                }},
                "outputs": {},
                "method_name": "tensorflow/serving/predict",
            })
        );
    }
}
