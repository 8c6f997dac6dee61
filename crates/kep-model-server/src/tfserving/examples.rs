//! `:classify` and `:regress`: examples read as `util/json_tensor.cc` reads them into
//! `tf.Example`s, fed to the model as `tf.io.parse_example` would feed a TensorFlow model
//! (each input a fixed-length feature of the same name), and the results checked and
//! written as `servables/tensorflow/classifier.cc` and `regressor.cc` do.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::{Map, Value};
use tract_onnx::prelude::Tensor;

use super::json::{self, format_error, is_b64, type_name};
use crate::model::{DataType, TensorSpec};
use crate::{Failure, tensor};

/// What the model's `serving_default` signature is, as its `method_name` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Predict,
    /// The positions of the scores output (FP32 `[batch, classes]`) and of the classes
    /// output (BYTES `[batch, classes]`), at least one of them.
    Classify {
        scores: Option<usize>,
        classes: Option<usize>,
    },
    /// The one FP32 output, `[batch]` or `[batch, 1]`.
    Regress,
}

impl Method {
    /// A model takes examples when each input is a fixed-length feature per example (a
    /// variable first dimension, the rest fixed); it regresses with one FP32 output of
    /// `[batch]` or `[batch, 1]`, and classifies with scores and/or classes outputs of
    /// `[batch, classes]`, the shapes TF Serving's classifier and regressor accept.
    pub fn of(inputs: &[TensorSpec], outputs: &[TensorSpec]) -> Method {
        let fixed_features = !inputs.is_empty()
            && inputs
                .iter()
                .all(|s| s.shape.first() == Some(&-1) && s.shape[1..].iter().all(|d| *d >= 0));
        if !fixed_features {
            return Method::Predict;
        }
        if let [o] = outputs
            && o.datatype == DataType::Fp32
            && (o.shape.len() == 1 || (o.shape.len() == 2 && o.shape[1] == 1))
        {
            return Method::Regress;
        }
        let (mut scores, mut classes) = (None, None);
        for (i, o) in outputs.iter().enumerate() {
            let slot = match o.datatype {
                DataType::Fp32 if o.shape.len() == 2 => &mut scores,
                DataType::Bytes if o.shape.len() == 2 => &mut classes,
                _ => return Method::Predict,
            };
            if slot.replace(i).is_some() {
                return Method::Predict;
            }
        }
        if scores.is_none() && classes.is_none() {
            return Method::Predict;
        }
        Method::Classify { scores, classes }
    }

    pub fn name(self) -> &'static str {
        match self {
            Method::Predict => "tensorflow/serving/predict",
            Method::Classify { .. } => "tensorflow/serving/classify",
            Method::Regress => "tensorflow/serving/regress",
        }
    }
}

/// A `tf.Example` feature's list type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bytes,
    Float,
    Int64,
}

impl Kind {
    /// As `IncompatibleFeatureKindError` names it.
    fn list_name(self) -> &'static str {
        match self {
            Kind::Bytes => "bytes",
            Kind::Float => "float",
            Kind::Int64 => "int64",
        }
    }

    /// As `parse_example` names it (`DataTypeString`).
    fn dtype_name(self) -> &'static str {
        match self {
            Kind::Bytes => "string",
            Kind::Float => "float",
            Kind::Int64 => "int64",
        }
    }

    /// The feature type `parse_example` would read an input of `datatype` from.
    fn of(datatype: DataType) -> Kind {
        match datatype {
            DataType::Fp16 | DataType::Fp32 | DataType::Fp64 => Kind::Float,
            DataType::Bytes => Kind::Bytes,
            _ => Kind::Int64,
        }
    }
}

/// A feature's values, as JSON leaves of its kind: floats rounded to f32 (a float_list
/// holds f32), booleans as 1 and 0, bytes decoded from base64.
#[derive(Debug, Clone, Default)]
pub struct Feature {
    pub kind: Option<Kind>,
    pub values: Vec<Value>,
}

pub type Example = BTreeMap<String, Feature>;

/// `MakeExampleFromJsonObject`.
fn example(v: &Value) -> Result<Example, Failure> {
    let Value::Object(members) = v else {
        return Err(Failure::bad_request(format!(
            "Example must be JSON object but got JSON {}",
            type_name(v)
        )));
    };
    let mut features = Example::new();
    for (name, content) in members {
        let mut feature = Feature::default();
        match content {
            Value::Array(items) => {
                for item in items {
                    add_value(item, name, &mut feature)?;
                }
            }
            single => add_value(single, name, &mut feature)?,
        }
        features.insert(name.clone(), feature);
    }
    Ok(features)
}

/// `AddValueToFeature`: one value of a feature, whose kind its first value set.
fn add_value(v: &Value, name: &str, feature: &mut Feature) -> Result<(), Failure> {
    let unexpected = || {
        Failure::bad_request(format!(
            "Feature: {name} has element with unexpected JSON type: {}",
            type_name(v)
        ))
    };
    let (kind, value) = match v {
        Value::Null | Value::Array(_) => return Err(unexpected()),
        Value::Object(_) if !is_b64(v) => return Err(unexpected()),
        Value::Object(o) => {
            let text = o.get("b64").and_then(Value::as_str).unwrap_or_default();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| Failure::bad_request("Unable to base64 decode"))?;
            let text = String::from_utf8(bytes)
                .map_err(|_| Failure::bad_request("BYTES elements must be UTF-8 text"))?;
            (Kind::Bytes, Value::String(text))
        }
        Value::String(_) => (Kind::Bytes, v.clone()),
        Value::Bool(b) => (Kind::Int64, Value::from(i64::from(*b))),
        Value::Number(n) if n.is_f64() => {
            let x = n.as_f64().unwrap_or_default() as f32;
            (Kind::Float, Value::from(f64::from(x)))
        }
        Value::Number(n) => match n.as_i64() {
            Some(i) => (Kind::Int64, Value::from(i)),
            None => {
                return Err(Failure::bad_request(format!(
                    "Feature: {name} has uint64_t element. Only int64_t is supported."
                )));
            }
        },
    };
    match feature.kind {
        Some(k) if k != kind => Err(Failure::bad_request(format!(
            "Unexpected element type in feature: {name} expecting type: {}",
            k.list_name()
        ))),
        _ => {
            feature.kind = Some(kind);
            feature.values.push(value);
            Ok(())
        }
    }
}

/// A `:classify` or `:regress` body (`FillClassifyRegressRequestFromJson`): its signature
/// name and its examples, each with the context's features it does not give itself.
pub struct Request {
    pub signature_name: Option<String>,
    pub examples: Vec<Example>,
}

impl Request {
    /// Each example with the context's features it does not give itself: the context is
    /// serialized before each example, so the example's features win; an empty one (no
    /// list type) is skipped by the parser.
    pub fn new(
        signature_name: Option<String>,
        context: Option<Example>,
        own: Vec<Example>,
    ) -> Request {
        let examples = own
            .into_iter()
            .map(|own| {
                let mut merged = context.clone().unwrap_or_default();
                for (name, feature) in own {
                    if feature.kind.is_some() || !merged.contains_key(&name) {
                        merged.insert(name, feature);
                    }
                }
                merged
            })
            .collect();
        Request {
            signature_name,
            examples,
        }
    }
}

pub fn read(body: &[u8]) -> Result<Request, Failure> {
    let doc = json::parse(body)?;
    let signature_name = json::signature_name(&doc)?.map(str::to_owned);
    let context = doc.get("context").map(example).transpose()?;
    let whole = |doc: Map<String, Value>| Value::Object(doc);
    let items = match doc.get("examples") {
        None => {
            return Err(format_error(
                &whole(doc),
                "When method is classify, key 'examples' is expected and was not found",
            ));
        }
        Some(Value::Array(items)) if items.is_empty() => {
            return Err(format_error(
                &whole(doc),
                "'examples' value is an empty array",
            ));
        }
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(format_error(
                &whole(doc),
                "Expecting 'examples' value to be an list/array",
            ));
        }
    };
    let own = items.iter().map(example).collect::<Result<_, _>>()?;
    Ok(Request::new(signature_name, context, own))
}

/// The `examples` request as the model's inputs, as `parse_example` with a fixed-length
/// feature per input would read them (`util/example_proto_fast_parsing.cc` in TensorFlow,
/// for its texts).
pub fn inputs(specs: &[TensorSpec], request: &Request) -> Result<Vec<(String, Tensor)>, Failure> {
    let mut leaves: Vec<Vec<Value>> = vec![Vec::new(); specs.len()];
    for (index, example) in request.examples.iter().enumerate() {
        for (spec, leaves) in specs.iter().zip(&mut leaves) {
            let name = &spec.name;
            let want = Kind::of(spec.datatype);
            let per_example: Vec<usize> = spec.shape[1..].iter().map(|d| *d as usize).collect();
            let Some((kind, values)) = example
                .get(name)
                .and_then(|f| f.kind.map(|k| (k, &f.values)))
            else {
                return Err(Failure::bad_request(format!(
                    "Name: <unknown>, Feature: {name} (data type: {}) is required but could \
                     not be found.",
                    want.dtype_name()
                )));
            };
            let example_error = |what: String| {
                Failure::bad_request(format!(
                    "Name: <unknown>, Key: {name}, Index: {index}.  {what}"
                ))
            };
            if kind != want {
                return Err(example_error(format!(
                    "Data types don't match. Data type: {} but expected type: {}",
                    kind.dtype_name(),
                    want.dtype_name()
                )));
            }
            if values.len() != per_example.iter().product::<usize>() {
                return Err(example_error(format!(
                    "Number of {} values != expected.  Values size: {} but output shape: {}",
                    kind.list_name(),
                    values.len(),
                    json::shape_string(&per_example)
                )));
            }
            leaves.extend(values.iter().map(|v| match (spec.datatype, v) {
                (DataType::Bool, Value::Number(n)) => Value::Bool(n.as_i64() != Some(0)),
                _ => v.clone(),
            }));
        }
    }
    specs
        .iter()
        .zip(leaves)
        .map(|(spec, values)| {
            let shape: Vec<usize> = std::iter::once(request.examples.len())
                .chain(spec.shape[1..].iter().map(|d| *d as usize))
                .collect();
            let refs: Vec<&Value> = values.iter().collect();
            tensor::from_json(spec.datatype, &shape, &refs, false)
                .map(|t| (spec.name.clone(), t))
                .map_err(|e| Failure::bad_request(format!("input {}: {e}", spec.name)))
        })
        .collect()
}

/// The one input of a SavedModel's classify or regress signature, which takes the examples
/// serialized (`InputToSerializedExampleTensor`); `None` for a model that takes features.
pub fn serialized_input(model: &crate::Model) -> Option<&TensorSpec> {
    match model.inputs.as_slice() {
        [input] if model.format == crate::model::Format::SavedModel => Some(input),
        _ => None,
    }
}

/// The examples as a BYTES tensor of serialized `tf.Example`s, one per example.
pub fn serialized(request: &Request, input: &TensorSpec) -> Result<Tensor, Failure> {
    use prost::Message as _;

    use super::grpc::tensorflow::{self as tf, feature::Kind as ProtoKind};
    if input.datatype != DataType::Bytes {
        return Err(Failure::bad_request(format!(
            "the signature's input {} takes {}, not serialized tf.Examples",
            input.name,
            input.datatype.name()
        )));
    }
    let proto = |feature: &Feature| -> tf::Feature {
        let kind = feature.kind.map(|kind| match kind {
            Kind::Bytes => ProtoKind::BytesList(tf::BytesList {
                value: (feature.values.iter())
                    .map(|v| v.as_str().unwrap_or_default().as_bytes().to_vec())
                    .collect(),
            }),
            Kind::Float => ProtoKind::FloatList(tf::FloatList {
                value: (feature.values.iter())
                    .map(|v| v.as_f64().unwrap_or_default() as f32)
                    .collect(),
            }),
            Kind::Int64 => ProtoKind::Int64List(tf::Int64List {
                value: feature.values.iter().filter_map(Value::as_i64).collect(),
            }),
        });
        tf::Feature { kind }
    };
    let blobs: Vec<tract_onnx::prelude::Blob> = (request.examples.iter())
        .map(|example| {
            let feature = example
                .iter()
                .map(|(name, f)| (name.clone(), proto(f)))
                .collect();
            let example = tf::Example {
                features: Some(tf::Features { feature }),
            };
            tract_onnx::prelude::Blob::from_bytes(&example.encode_to_vec())
        })
        .collect::<Result<_, _>>()
        .map_err(|e| Failure::internal(e.to_string()))?;
    let count = blobs.len();
    tract_onnx::prelude::tract_ndarray::Array1::from_vec(blobs)
        .into_shape_with_order(count)
        .map(Tensor::from)
        .map_err(|e| Failure::internal(e.to_string()))
}

/// `TensorShape::DebugString`: `[2,3]`.
fn shape_of(t: &Tensor) -> String {
    json::shape_string(t.shape())
}

/// `PostProcessClassificationResult`: per example, `(label, score)` per class; the label is
/// empty without a classes output and the score 0 without a scores output, as in TF
/// Serving.
pub fn classifications(
    outputs: &[Tensor],
    scores: Option<usize>,
    classes: Option<usize>,
    examples: usize,
) -> Result<Vec<Vec<(String, f32)>>, Failure> {
    let bad = Failure::bad_request;
    for (which, at) in [("classes", classes), ("scores", scores)] {
        let Some(t) = at.map(|i| &outputs[i]) else {
            continue;
        };
        if t.rank() != 2 {
            return Err(bad(format!(
                "Expected Tensor shape: [batch_size num_classes] but got {}",
                shape_of(t)
            )));
        }
        if t.shape()[0] != examples {
            return Err(bad(format!(
                "Expected {which} output batch size of {examples}. Got: {}",
                t.shape()[0]
            )));
        }
    }
    let labels = match classes.map(|i| &outputs[i]) {
        Some(t) => match tensor::to_data(t, DataType::Bytes) {
            Ok(tensor::Data::Text(labels)) => Some(labels),
            _ => return Err(Failure::internal("the classes output is not text")),
        },
        None => None,
    };
    let values = match scores.map(|i| &outputs[i]) {
        Some(t) => match tensor::to_data(t, DataType::Fp32) {
            Ok(tensor::Data::F32(values)) => Some(values),
            _ => return Err(Failure::internal("the scores output is not FP32")),
        },
        None => None,
    };
    let width = |i: Option<usize>| i.map(|i| outputs[i].shape()[1]);
    let count = match (width(classes), width(scores)) {
        (Some(c), Some(s)) if c != s => {
            return Err(bad(format!(
                "Tensors class and score should match in dim_size(1). Got {c} vs. {s}"
            )));
        }
        (Some(n), _) | (None, Some(n)) => n,
        (None, None) => 0,
    };
    Ok((0..examples)
        .map(|e| {
            let row = (0..count).map(|c| {
                let at = e * count + c;
                let label = labels.as_ref().map_or("", |l| l[at].as_str());
                let score = values.as_ref().map_or(0.0, |v| v[at]);
                (label.to_owned(), score)
            });
            row.collect()
        })
        .collect())
}

/// `PostProcessRegressionResult`: one value per example.
pub fn regressions(output: &Tensor, examples: usize) -> Result<Vec<f32>, Failure> {
    let shape = output.shape();
    if !(shape.len() == 1 || (shape.len() == 2 && shape[1] == 1)) {
        return Err(Failure::bad_request(format!(
            "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got \
             {}",
            shape_of(output)
        )));
    }
    if shape[0] != examples {
        return Err(Failure::bad_request(format!(
            "Input batch size did not match output batch size: {examples} vs. {}",
            shape[0]
        )));
    }
    match tensor::to_data(output, DataType::Fp32) {
        Ok(tensor::Data::F32(values)) => Ok(values),
        _ => Err(Failure::internal("the regression output is not FP32")),
    }
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

    fn refused(body: &str) -> String {
        read(body.as_bytes()).err().expect("refused").message
    }

    #[test]
    fn examples_are_read_as_tf_serving_reads_them() {
        assert_eq!(
            refused(r#"{"instances": []}"#),
            "JSON Value: {\n    \"instances\": []\n} When method is classify, key 'examples' \
             is expected and was not found"
        );
        assert_eq!(
            refused(r#"{"examples": []}"#),
            "JSON Value: {\n    \"examples\": []\n} 'examples' value is an empty array"
        );
        assert_eq!(
            refused(r#"{"examples": {}}"#),
            "JSON Value: {\n    \"examples\": {}\n} Expecting 'examples' value to be an list/array"
        );
        assert_eq!(
            refused(r#"{"examples": [[1]]}"#),
            "Example must be JSON object but got JSON Array"
        );
        assert_eq!(
            refused(r#"{"examples": [{"x": [[1]]}]}"#),
            "Feature: x has element with unexpected JSON type: Array"
        );
        assert_eq!(
            refused(r#"{"examples": [{"x": [1.5, 2]}]}"#),
            "Unexpected element type in feature: x expecting type: float"
        );
        assert_eq!(
            refused(r#"{"examples": [{"x": 18446744073709551615}]}"#),
            "Feature: x has uint64_t element. Only int64_t is supported."
        );
    }

    #[test]
    fn features_fill_inputs_as_parse_example_would() {
        let specs = [
            spec("x", DataType::Fp32, &[-1, 2]),
            spec("n", DataType::Int32, &[-1]),
        ];
        let request = read(
            br#"{"context": {"n": 7}, "examples": [{"x": [1.0, 2.5]}, {"x": [3.0, 4.0], "n": 8}]}"#,
        )
        .unwrap();
        let tensors = inputs(&specs, &request).unwrap();
        assert_eq!(tensors[0].1.shape(), [2, 2]);
        assert_eq!(
            tensor::to_data(&tensors[1].1, DataType::Int32).unwrap(),
            tensor::Data::Int(vec![7, 8])
        );
        let error = |body: &str| {
            inputs(&specs, &read(body.as_bytes()).unwrap())
                .unwrap_err()
                .message
        };
        assert_eq!(
            error(r#"{"examples": [{"x": [1.0, 2.0]}]}"#),
            "Name: <unknown>, Feature: n (data type: int64) is required but could not be found."
        );
        assert_eq!(
            error(r#"{"examples": [{"x": [1, 2], "n": 1}]}"#),
            "Name: <unknown>, Key: x, Index: 0.  Data types don't match. Data type: int64 but \
             expected type: float"
        );
        assert_eq!(
            error(r#"{"examples": [{"x": [1.0, 2.0], "n": 1}, {"x": [1.0], "n": 1}]}"#),
            "Name: <unknown>, Key: x, Index: 1.  Number of float values != expected.  Values \
             size: 1 but output shape: [2]"
        );
    }

    #[test]
    fn results_are_checked_and_written_as_tf_serving_does() {
        let scores = Tensor::from(
            tract_onnx::prelude::tract_ndarray::arr2(&[[0.25f32, 0.75], [1.0, 0.0]]).into_dyn(),
        );
        assert_eq!(
            classifications(std::slice::from_ref(&scores), Some(0), None, 2).unwrap(),
            [
                [(String::new(), 0.25), (String::new(), 0.75)],
                [(String::new(), 1.0), (String::new(), 0.0)]
            ]
        );
        assert_eq!(
            classifications(std::slice::from_ref(&scores), Some(0), None, 3)
                .unwrap_err()
                .message,
            "Expected scores output batch size of 3. Got: 2"
        );
        assert_eq!(
            regressions(&scores, 2).unwrap_err().message,
            "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got \
             [2,2]"
        );
        let column =
            Tensor::from(tract_onnx::prelude::tract_ndarray::arr2(&[[0.5f32], [2.0]]).into_dyn());
        assert_eq!(regressions(&column, 2).unwrap(), [0.5, 2.0]);
    }
}
