//! `Predict` as TF Serving runs it on a SavedModel (`servables/tensorflow/predict_util.cc`,
//! `RunPredict`, and TensorFlow's `saved_model::GetInputValues` and session), and
//! `tf.Example`s as the REST side's examples.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;
use tonic::Status;

use super::dtype;
use super::tensor::{Fed, from_proto, to_proto, type_string};
use super::tensorflow::serving::{ModelSpec, PredictRequest};
use super::tensorflow::{self, TensorProto, feature};
use crate::model::DataType;
use crate::stats::Clock;
use crate::tfserving::examples::{Example, Feature, Kind};
use crate::tfserving::verify_inputs_size;
use crate::{Failure, Served, Version};

/// The requested outputs of the model run on the request's inputs, by alias.
pub async fn run(
    served: &Served,
    version: &Version,
    spec: &ModelSpec,
    request: PredictRequest,
) -> Result<HashMap<String, TensorProto>, Status> {
    let signature_name = super::signature_name(spec);
    let Some(signature) = version.signature(signature_name) else {
        return Err(Status::failed_precondition(format!(
            "Serving signature key \"{signature_name}\" not found."
        )));
    };
    let model = &signature.model;
    verify_inputs_size(request.inputs.keys().map(String::as_str), &model.inputs)?;
    // The signature's inputs, in its map's (sorted) order: the session's arguments.
    let mut specs: Vec<_> = model.inputs.iter().collect();
    specs.sort_by(|a, b| a.name.cmp(&b.name));
    let mut fed = Vec::with_capacity(specs.len());
    for spec in &specs {
        let alias = &spec.name;
        let Some(proto) = request.inputs.get(alias) else {
            let sent: BTreeSet<&str> = request.inputs.keys().map(String::as_str).collect();
            return Err(Status::invalid_argument(format!(
                "Signature input alias: {alias}(feed name: {alias}) not found in request and no \
                 default value provided. Inputs expected to be in the request {{{}}}, or default \
                 input alias set: ",
                sent.into_iter().collect::<Vec<_>>().join(",")
            )));
        };
        let tensor = from_proto(proto)
            .ok_or_else(|| Status::invalid_argument(format!("tensor parsing error: {alias}")))?;
        fed.push(tensor);
    }
    let aliases = outputs(&request.output_filter, model)?;
    // `FunctionCallFrame::SetArgs`: each argument of the placeholder's type.
    let mut inputs = Vec::with_capacity(fed.len());
    for (i, (spec, fed)) in specs.iter().zip(fed).enumerate() {
        let given = match fed {
            Fed::Tensor(t) if DataType::of(t.datum_type()) == Some(spec.datatype) => {
                inputs.push((spec.name.clone(), t));
                continue;
            }
            Fed::Tensor(t) => {
                DataType::of(t.datum_type()).map_or(tensorflow::DataType::DtInvalid, dtype)
            }
            Fed::Other(dt) => dt,
        };
        return Err(Status::invalid_argument(format!(
            "Expects arg[{i}] to be {} but {} is provided",
            type_string(dtype(spec.datatype)),
            type_string(given)
        )));
    }
    let mut outputs = served
        .run(model, &mut Clock::start(), inputs)
        .await
        .map_err(Failure::from)?;
    aliases
        .into_iter()
        .map(|(alias, i)| {
            let t = std::mem::take(&mut outputs[i]);
            let datatype = DataType::of(t.datum_type()).unwrap_or(model.outputs[i].datatype);
            let proto = to_proto(&t, datatype)
                .map_err(|e| Status::internal(format!("output {alias}: {e}")))?;
            Ok((alias, proto))
        })
        .collect()
}

/// `PreProcessPrediction`'s outputs: those of `output_filter`, each once, or every one; with
/// their positions among the model's outputs.
fn outputs(filter: &[String], model: &crate::Model) -> Result<Vec<(String, usize)>, Status> {
    let position = |alias: &str| model.outputs.iter().position(|s| s.name == alias);
    if filter.is_empty() {
        return Ok(model
            .outputs
            .iter()
            .map(|s| s.name.clone())
            .zip(0..)
            .collect());
    }
    let mut chosen: Vec<(String, usize)> = Vec::with_capacity(filter.len());
    for alias in filter {
        let Some(i) = position(alias) else {
            let mut names: Vec<&str> = model.outputs.iter().map(|s| s.name.as_str()).collect();
            names.sort_unstable();
            return Err(Status::invalid_argument(format!(
                "output tensor alias not found in signature: {alias} Outputs expected to be in \
                 the set {{{}}}.",
                names.join(",")
            )));
        };
        if chosen.iter().any(|(a, _)| a == alias) {
            return Err(Status::invalid_argument(format!(
                "duplicate output tensor alias: {alias}"
            )));
        }
        chosen.push((alias.clone(), i));
    }
    Ok(chosen)
}

/// A `tf.Example` as the REST side reads a JSON one: each feature's kind and values (floats
/// as the f32 they are, bytes as text).
pub fn example(e: tensorflow::Example) -> Result<Example, Status> {
    let features = e.features.map(|f| f.feature).unwrap_or_default();
    features
        .into_iter()
        .map(|(name, f)| {
            let feature = match f.kind {
                None => Feature::default(),
                Some(feature::Kind::FloatList(l)) => Feature {
                    kind: Some(Kind::Float),
                    values: l
                        .value
                        .into_iter()
                        .map(|x| Value::from(f64::from(x)))
                        .collect(),
                },
                Some(feature::Kind::Int64List(l)) => Feature {
                    kind: Some(Kind::Int64),
                    values: l.value.into_iter().map(Value::from).collect(),
                },
                Some(feature::Kind::BytesList(l)) => Feature {
                    kind: Some(Kind::Bytes),
                    values: l
                        .value
                        .into_iter()
                        .map(|b| String::from_utf8(b).map(Value::from))
                        .collect::<Result<_, _>>()
                        .map_err(|_| {
                            Status::invalid_argument("BYTES elements must be UTF-8 text")
                        })?,
                },
            };
            Ok((name, feature))
        })
        .collect()
}
