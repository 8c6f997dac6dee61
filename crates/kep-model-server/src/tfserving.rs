//! The TensorFlow Serving REST API: model status, metadata and `:predict`, in the row
//! (`instances`) and the columnar (`inputs`) format, answered as TF Serving answers them.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::Uri;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tract_onnx::prelude::Tensor;

use crate::model::{DataType, TensorSpec};
use crate::stats::Clock;
use crate::{Failure, Served, VERSION, tensor};

pub fn router(served: Arc<Served>) -> Router {
    // `{m}:predict` is one path segment, which axum cannot split: POST takes the last
    // segment whole and `predict` splits the verb off.
    Router::new()
        .route("/v1/models/{m}", get(status).post(predict))
        .route("/v1/models/{m}/versions/{v}", get(status).post(predict))
        .route("/v1/models/{m}/metadata", get(metadata))
        .route("/v1/models/{m}/versions/{v}/metadata", get(metadata))
        .with_state(served)
}

/// A path's model and, when it names one, version.
#[derive(Deserialize)]
struct Target {
    m: String,
    v: Option<String>,
}

type Answer = Result<Json<Value>, Failure>;

/// Checks the path names the served model: TF Serving's model names hold no ':' and its
/// versions are integers (so `/versions/01` is version 1), else the request is malformed.
fn find(
    served: &Served,
    method: &str,
    uri: &Uri,
    target: &Target,
    missing: fn(&str, Option<u64>) -> String,
) -> Result<(), Failure> {
    let malformed = || Failure::bad_request(format!("Malformed request: {method} {}", uri.path()));
    if target.m.contains(':') {
        return Err(malformed());
    }
    let version = match &target.v {
        Some(v) if v.bytes().all(|b| b.is_ascii_digit()) => {
            Some(v.parse::<u64>().map_err(|_| malformed())?)
        }
        Some(_) => return Err(malformed()),
        None => None,
    };
    let version_text = version.map(|v| v.to_string());
    if served.is(&target.m, version_text.as_deref()) {
        Ok(())
    } else {
        Err(Failure::not_found(missing(&target.m, version)))
    }
}

fn servable_not_found(m: &str, version: Option<u64>) -> String {
    match version {
        Some(v) => format!("Servable not found for request: Specific({m}, {v})"),
        None => format!("Servable not found for request: Latest({m})"),
    }
}

async fn status(State(served): State<Arc<Served>>, uri: Uri, Path(t): Path<Target>) -> Answer {
    // The status call words its 404 differently from the others, as TF Serving does.
    find(&served, "GET", &uri, &t, |m, version| match version {
        Some(v) => format!("Could not find version {v} of model {m}"),
        None => format!("Could not find any versions of model {m}"),
    })?;
    Ok(Json(json!({"model_version_status": [{
        "version": VERSION,
        "state": "AVAILABLE",
        "status": {"error_code": "OK", "error_message": ""},
    }]})))
}

async fn metadata(State(served): State<Arc<Served>>, uri: Uri, Path(t): Path<Target>) -> Answer {
    find(&served, "GET", &uri, &t, servable_not_found)?;
    let model = &served.model;
    Ok(Json(json!({
        "model_spec": {"name": served.name, "signature_name": "", "version": VERSION},
        "metadata": {"signature_def": {"signature_def": {"serving_default": {
            "inputs": signature(&model.inputs),
            "outputs": signature(&model.outputs),
            "method_name": "tensorflow/serving/predict",
        }}}},
    })))
}

/// TensorInfo maps, as TF Serving's metadata gives them (int64 sizes as strings).
fn signature(specs: &[TensorSpec]) -> Value {
    let info = |s: &TensorSpec| {
        let dim: Vec<Value> = s
            .shape
            .iter()
            .map(|d| json!({"size": d.to_string(), "name": ""}))
            .collect();
        json!({
            "dtype": dtype(s.datatype),
            "tensor_shape": {"dim": dim, "unknown_rank": false},
            "name": s.name,
        })
    };
    Value::Object(specs.iter().map(|s| (s.name.clone(), info(s))).collect())
}

/// TensorFlow's name of a datatype.
fn dtype(datatype: DataType) -> &'static str {
    match datatype {
        DataType::Bool => "DT_BOOL",
        DataType::Uint8 => "DT_UINT8",
        DataType::Uint16 => "DT_UINT16",
        DataType::Uint32 => "DT_UINT32",
        DataType::Uint64 => "DT_UINT64",
        DataType::Int8 => "DT_INT8",
        DataType::Int16 => "DT_INT16",
        DataType::Int32 => "DT_INT32",
        DataType::Int64 => "DT_INT64",
        DataType::Fp16 => "DT_HALF",
        DataType::Fp32 => "DT_FLOAT",
        DataType::Fp64 => "DT_DOUBLE",
        DataType::Bytes => "DT_STRING",
    }
}

#[derive(Deserialize)]
struct PredictRequest {
    signature_name: Option<String>,
    instances: Option<Value>,
    inputs: Option<Value>,
}

async fn predict(
    State(served): State<Arc<Served>>,
    uri: Uri,
    Path(mut t): Path<Target>,
    body: Bytes,
) -> Answer {
    let last = t.v.as_mut().unwrap_or(&mut t.m);
    let verb = last.find(':').map(|at| last.split_off(at));
    match verb.as_deref() {
        Some(":predict") => {}
        Some(":classify" | ":regress") => {
            return Err(Failure::bad_request("only :predict is served"));
        }
        _ => {
            let path = uri.path();
            return Err(Failure::bad_request(format!(
                "Malformed request: POST {path}"
            )));
        }
    }
    find(&served, "POST", &uri, &t, servable_not_found)?;
    let model = &served.model;
    let (format, inputs) = decode(&model.inputs, &body)?;
    let outputs = served.run(&mut Clock::start(), inputs).await?;
    let mut nested = nested(&outputs, &model.outputs)?;
    match format {
        Format::Rows => Ok(Json(json!({ "predictions": rows(nested)? }))),
        Format::Columns => {
            let outputs = if nested.len() == 1 {
                nested.swap_remove(0).1
            } else {
                Value::Object(nested.into_iter().map(|(n, v)| (n.to_owned(), v)).collect())
            };
            Ok(Json(json!({ "outputs": outputs })))
        }
    }
}

/// How a `:predict` body gives its inputs; the answer comes in the same format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `instances`: a list of instances, stacked along a new batch dimension.
    Rows,
    /// `inputs`: each input's whole tensor.
    Columns,
}

/// A `:predict` body read against the model's `inputs`: its format and its named tensors.
pub fn decode(
    specs: &[TensorSpec],
    body: &[u8],
) -> Result<(Format, Vec<(String, Tensor)>), Failure> {
    let request: PredictRequest = serde_json::from_slice(body)
        .map_err(|e| Failure::bad_request(format!("JSON Parse error: {e}")))?;
    if let Some(name) = &request.signature_name
        && name != "serving_default"
    {
        return Err(Failure::bad_request(format!(
            "Serving signature name: \"{name}\" not found in signature def"
        )));
    }
    let (format, inputs) = match (&request.instances, &request.inputs) {
        (Some(Value::Array(instances)), None) => (Format::Rows, stack(instances, specs)),
        (Some(_), None) => {
            return Err(Failure::bad_request(
                "Expecting 'instances' to be an list/array",
            ));
        }
        (None, Some(inputs)) => (Format::Columns, columns(inputs, specs)),
        (None, None) => return Err(Failure::bad_request("Missing 'inputs' or 'instances' key")),
        (Some(_), Some(_)) => {
            return Err(Failure::bad_request(
                "Not formatted correctly expecting only one of 'inputs' or 'instances' keys exclusively",
            ));
        }
    };
    Ok((format, tensors(inputs.map_err(Failure::bad_request)?)?))
}

/// An input as read from a request: its spec, its shape and its leaves, row-major.
type Input<'a> = (&'a TensorSpec, Vec<usize>, Vec<&'a Value>);

/// An object naming inputs; `{"b64": "…"}` is a value, not a name, as in TF Serving.
fn named(v: &Value) -> Option<&Map<String, Value>> {
    match v {
        Value::Object(o) if !(o.len() == 1 && o.get("b64").is_some_and(Value::is_string)) => {
            Some(o)
        }
        _ => None,
    }
}

fn spec<'a>(specs: &'a [TensorSpec], name: &str) -> Result<&'a TensorSpec, String> {
    specs.iter().find(|s| s.name == name).ok_or_else(|| {
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        format!(
            "unexpected input {name}: the model's inputs are {}",
            names.join(", ")
        )
    })
}

/// The input a bare value is given to: only a one-input model takes one.
fn only(specs: &[TensorSpec]) -> Result<&TensorSpec, String> {
    match specs {
        [spec] => Ok(spec),
        _ => Err(format!(
            "the model takes {} inputs: give them as an object of named inputs",
            specs.len()
        )),
    }
}

/// The row format's instances stacked along a new leading batch dimension, per input.
fn stack<'a>(instances: &'a [Value], specs: &'a [TensorSpec]) -> Result<Vec<Input<'a>>, String> {
    let first = instances.first().ok_or("'instances' is empty")?;
    let Some(names) = named(first) else {
        let values = instances.iter().enumerate().map(|(i, v)| match named(v) {
            None => Ok(v),
            Some(_) => Err(format!(
                "instance {i} names inputs where instance 0 does not"
            )),
        });
        return Ok(vec![batch(only(specs)?, values)?]);
    };
    names
        .keys()
        .map(|name| {
            let values = instances.iter().enumerate().map(|(i, v)| match named(v) {
                Some(o) if o.len() == names.len() => o
                    .get(name)
                    .ok_or_else(|| format!("instance {i} lacks input {name}")),
                _ => Err(format!(
                    "instance {i} does not name the inputs instance 0 names"
                )),
            });
            batch(spec(specs, name)?, values)
        })
        .collect()
}

/// One input's values, one per instance, as a batch: they must all have the same shape.
fn batch<'a>(
    spec: &'a TensorSpec,
    values: impl Iterator<Item = Result<&'a Value, String>>,
) -> Result<Input<'a>, String> {
    let mut shape: Option<Vec<usize>> = None;
    let mut leaves = Vec::new();
    let mut count = 0;
    for (i, v) in values.enumerate() {
        let name = &spec.name;
        let (s, l) = tensor::flatten(v?).map_err(|e| format!("input {name}: instance {i}: {e}"))?;
        match &shape {
            Some(first) if *first != s => {
                return Err(format!(
                    "input {name}: instance {i} has shape {s:?} where instance 0 has {first:?}"
                ));
            }
            Some(_) => {}
            None => shape = Some(s),
        }
        leaves.extend(l);
        count += 1;
    }
    let shape = std::iter::once(count)
        .chain(shape.unwrap_or_default())
        .collect();
    Ok((spec, shape, leaves))
}

/// The columnar format's inputs: each value's nesting is its tensor's whole shape.
fn columns<'a>(inputs: &'a Value, specs: &'a [TensorSpec]) -> Result<Vec<Input<'a>>, String> {
    let input = |spec: &'a TensorSpec, v: &'a Value| {
        let (shape, leaves) =
            tensor::flatten(v).map_err(|e| format!("input {}: {e}", spec.name))?;
        Ok((spec, shape, leaves))
    };
    match named(inputs) {
        Some(o) => o
            .iter()
            .map(|(name, v)| input(spec(specs, name)?, v))
            .collect(),
        None => Ok(vec![input(only(specs)?, inputs)?]),
    }
}

fn tensors(inputs: Vec<Input<'_>>) -> Result<Vec<(String, Tensor)>, Failure> {
    inputs
        .into_iter()
        .map(|(spec, shape, leaves)| {
            tensor::from_json(spec.datatype, &shape, &leaves, true)
                .map(|t| (spec.name.clone(), t))
                .map_err(|e| Failure::bad_request(format!("input {}: {e}", spec.name)))
        })
        .collect()
}

/// Each output, named and nested along its whole shape; BYTES outputs as `{"b64": …}`
/// only when the name ends in `_bytes`, TF Serving's convention.
fn nested<'s>(
    outputs: &[Tensor],
    specs: &'s [TensorSpec],
) -> Result<Vec<(&'s str, Value)>, Failure> {
    outputs
        .iter()
        .zip(specs)
        .map(|(t, spec)| {
            let datatype = DataType::of(t.datum_type()).unwrap_or(spec.datatype);
            let data = tensor::to_data(t, datatype)
                .map_err(|e| Failure::internal(format!("output {}: {e}", spec.name)))?;
            let b64 = spec.name.ends_with("_bytes");
            Ok((spec.name.as_str(), data.nest(t.shape(), b64)))
        })
        .collect()
}

/// The row format's predictions: the outputs split along their batch dimension, one
/// value per instance, or one object of named outputs per instance when there are several.
fn rows(outputs: Vec<(&str, Value)>) -> Result<Value, Failure> {
    let mut columns = Vec::with_capacity(outputs.len());
    for (name, v) in outputs {
        let Value::Array(items) = v else {
            return Err(Failure::bad_request(format!(
                "the output {name} has no batch dimension"
            )));
        };
        columns.push((name, items));
    }
    if let [(_, items)] = columns.as_mut_slice() {
        return Ok(Value::Array(std::mem::take(items)));
    }
    let size = columns.first().map_or(0, |(_, items)| items.len());
    if let Some((name, items)) = columns.iter().find(|(_, items)| items.len() != size) {
        return Err(Failure::bad_request(format!(
            "the output {name} has batch size {} where {} has {size}",
            items.len(),
            columns[0].0
        )));
    }
    let mut columns: Vec<_> = columns
        .into_iter()
        .map(|(n, c)| (n, c.into_iter()))
        .collect();
    let predictions = (0..size)
        .map(|_| {
            let row = columns.iter_mut();
            Value::Object(
                row.map(|(n, c)| ((*n).to_owned(), c.next().unwrap_or_default()))
                    .collect(),
            )
        })
        .collect();
    Ok(Value::Array(predictions))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, datatype: DataType, shape: &[i64]) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            datatype,
            shape: shape.to_vec(),
        }
    }

    type Owned = (String, Vec<usize>, Vec<Value>);

    /// What `stack` gives, as comparable names, shapes and leaves.
    fn stacked(instances: Value, specs: &[TensorSpec]) -> Result<Vec<Owned>, String> {
        let Value::Array(instances) = instances else {
            panic!("a list")
        };
        let inputs = stack(&instances, specs)?;
        Ok(inputs
            .into_iter()
            .map(|(s, shape, leaves)| {
                (s.name.clone(), shape, leaves.into_iter().cloned().collect())
            })
            .collect())
    }

    /// Found writing the `tfserving_request` fuzz target: lists nested 40 deep, two items
    /// each, made `flatten` reserve room for 2^40 leaves (the process aborted, out of
    /// memory), and 64 deep overflowed the count (a panic where overflow is checked).
    #[test]
    fn deep_lists_are_a_bad_request() {
        let x = [spec("x", DataType::Fp32, &[-1, 2])];
        for (key, depth) in [("inputs", 40), ("instances", 64)] {
            let nested = format!("{}0{}", "[".repeat(depth), ",0]".repeat(depth));
            let body = match key {
                "inputs" => format!(r#"{{"inputs":{nested}}}"#),
                _ => format!(r#"{{"instances":[{nested}]}}"#),
            };
            let err = decode(&x, body.as_bytes()).expect_err("refused");
            assert_eq!(err.status, axum::http::StatusCode::BAD_REQUEST, "{key}");
            assert!(err.message.contains("ragged"), "{key}: {}", err.message);
        }
    }

    #[test]
    fn datatypes_have_tensorflow_names() {
        let names: Vec<&str> = DataType::ALL.into_iter().map(dtype).collect();
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
    fn signatures_read_as_tensor_infos() {
        let sig = signature(&[spec("x", DataType::Fp32, &[-1, 3])]);
        assert_eq!(
            sig,
            json!({"x": {
                "dtype": "DT_FLOAT",
                "tensor_shape": {
                    "dim": [{"size": "-1", "name": ""}, {"size": "3", "name": ""}],
                    "unknown_rank": false,
                },
                "name": "x",
            }})
        );
    }

    #[test]
    fn bare_instances_stack_along_a_new_batch_dimension() {
        let x = [spec("x", DataType::Fp32, &[-1, 2])];
        assert_eq!(
            stacked(json!([[1, 2], [3, 4], [5, 6]]), &x).unwrap(),
            [(
                "x".into(),
                vec![3, 2],
                vec![json!(1), json!(2), json!(3), json!(4), json!(5), json!(6)]
            )]
        );
        // Scalars per instance make a rank-1 batch; b64 objects are values, not names.
        let s = [spec("s", DataType::Bytes, &[-1])];
        let b64 = json!({"b64": "aGk="});
        assert_eq!(
            stacked(json!([{"b64": "aGk="}, "a"]), &s).unwrap(),
            [("s".into(), vec![2], vec![b64, json!("a")])]
        );
        assert!(
            stacked(json!([[1, 2], [3]]), &x)
                .unwrap_err()
                .contains("shape")
        );
        assert!(stacked(json!([[1, 2], {"x": [3, 4]}]), &x).is_err());
        assert!(stacked(json!([]), &x).is_err());
        let two = [
            spec("a", DataType::Fp32, &[-1]),
            spec("b", DataType::Fp32, &[-1]),
        ];
        assert!(
            stacked(json!([1, 2]), &two)
                .unwrap_err()
                .contains("2 inputs")
        );
    }

    #[test]
    fn named_instances_stack_per_input() {
        let two = [
            spec("a", DataType::Fp32, &[-1, 2]),
            spec("b", DataType::Int64, &[-1]),
        ];
        let mut got = stacked(json!([{"a": [1, 2], "b": 7}, {"b": 8, "a": [3, 4]}]), &two).unwrap();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            got,
            [
                (
                    "a".into(),
                    vec![2, 2],
                    vec![json!(1), json!(2), json!(3), json!(4)]
                ),
                ("b".into(), vec![2], vec![json!(7), json!(8)]),
            ]
        );
        assert!(
            stacked(json!([{"a": [1, 2], "c": 1}]), &two)
                .unwrap_err()
                .contains("unexpected input c")
        );
        assert!(stacked(json!([{"a": [1, 2], "b": 7}, {"a": [3, 4]}]), &two).is_err());
        assert!(stacked(json!([{"a": [1, 2], "b": 7}, {"a": [3, 4], "c": 8}]), &two).is_err());
        assert!(stacked(json!([{"a": [1, 2], "b": 7}, [3, 4]]), &two).is_err());
        assert!(stacked(json!([{"a": [1, 2], "b": 7}, {"a": [3], "b": 8}]), &two).is_err());
    }

    #[test]
    fn columnar_inputs_keep_their_whole_shape() {
        let x = [spec("x", DataType::Fp32, &[-1, 2])];
        let v = json!([[1, 2], [3, 4]]);
        let got = columns(&v, &x).unwrap();
        assert_eq!(
            (got[0].0.name.as_str(), got[0].1.as_slice()),
            ("x", &[2, 2][..])
        );
        let named = json!({"x": [[1, 2]]});
        assert_eq!(columns(&named, &x).unwrap()[0].1, [1, 2]);
        assert!(columns(&json!({"y": 1}), &x).is_err());
    }

    #[test]
    fn predictions_split_outputs_per_instance() {
        let one = rows(vec![("y", json!([[1, 2], [3, 4]]))]).unwrap();
        assert_eq!(one, json!([[1, 2], [3, 4]]));
        let two = rows(vec![("y", json!([1, 2])), ("z", json!([["a"], ["b"]]))]).unwrap();
        assert_eq!(two, json!([{"y": 1, "z": ["a"]}, {"y": 2, "z": ["b"]}]));
        assert!(rows(vec![("y", json!(1))]).is_err());
        assert!(rows(vec![("y", json!([1, 2])), ("z", json!([1]))]).is_err());
    }
}
