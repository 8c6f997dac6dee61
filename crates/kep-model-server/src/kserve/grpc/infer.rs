//! `ModelInfer`: inputs in `raw_input_contents` (the binary tensor format, as `tritonclient`
//! sends them) or in the typed `contents`, outputs answered in `raw_output_contents`, as
//! Triton answers them.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use tonic::Status;

use super::inference::InferParameter;
use super::inference::infer_parameter::ParameterChoice;
use super::inference::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use super::inference::model_infer_response::InferOutputTensor;
use super::inference::{InferTensorContents, ModelInferRequest, ModelInferResponse};
use super::version;
use crate::kserve::{Wanted, classification, find, model_failure};
use crate::model::{DataType, Input, Place};
use crate::shm::SharedMemory;
use crate::stats::Clock;
use crate::tensor;
use crate::{Failure, Served, Version};

/// An inference of the served model, counted in its statistics whatever its outcome (as
/// REST's are), once the model is found.
pub async fn infer(
    s: &Arc<Served>,
    request: ModelInferRequest,
) -> Result<ModelInferResponse, Status> {
    let found = find(s, &request.model_name, version(&request.model_version)?)?;
    let mut clock = Clock::start();
    let answer = answer(s, found, &mut clock, request).await;
    s.stats.record(&clock, answer.is_ok());
    answer.map_err(Status::from)
}

async fn answer(
    s: &Served,
    version: &Version,
    clock: &mut Clock,
    request: ModelInferRequest,
) -> Result<ModelInferResponse, Failure> {
    let model = version.model();
    let ModelInferRequest {
        id,
        inputs,
        outputs,
        raw_input_contents,
        ..
    } = request;
    let tensors = read_inputs(&s.name, &inputs, raw_input_contents, &s.shared_memory)?;
    let wanted = wanted(s, model, &outputs)?;

    let results = s
        .run(model, clock, tensors)
        .await
        .map_err(|e| model_failure(s, model, e))?;

    let mut response = ModelInferResponse {
        model_name: s.name.clone(),
        model_version: version.number.to_string(),
        id,
        ..Default::default()
    };
    for Wanted {
        output,
        classification: classes,
        shared,
        ..
    } in wanted
    {
        let spec = &model.outputs[output];
        let classified;
        let t = match classes {
            Some(k) => {
                classified = classification::top(&results[output], k)?;
                &classified
            }
            None => &results[output],
        };
        let datatype = DataType::of(t.datum_type()).unwrap_or(spec.datatype);
        let bytes = tensor::to_bytes(t, datatype).map_err(Failure::internal)?;
        // An output in shared memory keeps its place in the raw contents, empty, as in Triton.
        match shared {
            Some(slot) => {
                slot.write(&spec.name, &bytes)?;
                response.raw_output_contents.push(Bytes::new());
            }
            None => response.raw_output_contents.push(bytes.into()),
        }
        response.outputs.push(InferOutputTensor {
            name: spec.name.clone(),
            datatype: datatype.name().into(),
            shape: t.shape().iter().map(|&d| d as i64).collect(),
            ..Default::default()
        });
    }
    Ok(response)
}

/// A request's input tensors, from their raw contents, their typed ones or the shared
/// memory regions of `shm` they name: what `ModelInfer` reads of a request for `model`
/// before the model runs.
pub fn read_inputs(
    model: &str,
    inputs: &[InferInputTensor],
    raw_input_contents: Vec<Bytes>,
    shm: &SharedMemory,
) -> Result<Vec<(String, Input)>, Failure> {
    let shared = inputs
        .iter()
        .map(|input| shared_memory(&input.name, &input.parameters))
        .collect::<Result<Vec<_>, _>>()?;
    // Raw contents are those of every input not in shared memory, in order, or none.
    let carried = shared.iter().filter(|s| s.is_none()).count();
    if !raw_input_contents.is_empty() && raw_input_contents.len() != carried {
        return Err(Failure::bad_request(format!(
            "raw_input_contents holds {} tensors for the request's {carried} inputs not in \
             shared memory: it must hold one for each of them, or none",
            raw_input_contents.len(),
        )));
    }
    let mut raw = raw_input_contents.into_iter();
    inputs
        .iter()
        .zip(shared)
        .map(|(input, shared)| {
            let tensor = match shared {
                None => read(model, input, raw.next())?,
                Some(_) if input.contents.is_some() => {
                    return Err(Failure::bad_request(format!(
                        "unexpected 'content' provided when using shared memory for input \
                         tensor '{}' for model '{model}'",
                        input.name
                    )));
                }
                Some((region, offset, size)) => {
                    let (datatype, shape) =
                        crate::kserve::input_type(&input.name, &input.datatype, &input.shape)?;
                    tensor::in_place(
                        datatype,
                        &shape,
                        Place::Slot(shm.slot(region, offset, size)?),
                    )
                    .map_err(|e| Failure::bad_request(format!("input {}: {e}", input.name)))?
                }
            };
            Ok((input.name.clone(), tensor))
        })
        .collect()
}

/// A tensor's shared memory parameters, when it names a region: the region, the offset (0
/// unless given) and the byte size, as Triton reads them.
fn shared_memory<'a>(
    tensor: &str,
    parameters: &'a HashMap<String, InferParameter>,
) -> Result<Option<(&'a str, u64, u64)>, Failure> {
    let invalid = |name: &str, expected: &str| {
        Failure::bad_request(format!(
            "invalid value type for '{name}' parameter for tensor '{tensor}', expected {expected}."
        ))
    };
    let region = match parameters
        .get("shared_memory_region")
        .map(|p| &p.parameter_choice)
    {
        None => None,
        Some(Some(ParameterChoice::StringParam(region))) => Some(region.as_str()),
        Some(_) => return Err(invalid("shared_memory_region", "string_param")),
    };
    let number = |name: &str| match parameters.get(name).map(|p| &p.parameter_choice) {
        None => Ok(None),
        Some(_) if region.is_none() => Err(Failure::bad_request(format!(
            "'{name}' can not be specified without 'shared_memory_region' parameter for \
             tensor '{tensor}'"
        ))),
        Some(Some(ParameterChoice::Int64Param(n))) => u64::try_from(*n)
            .map(Some)
            .map_err(|_| invalid(name, "a non-negative int64_param")),
        Some(_) => Err(invalid(name, "int64_param")),
    };
    let offset = number("shared_memory_offset")?.unwrap_or(0);
    let byte_size = number("shared_memory_byte_size")?;
    match (region, byte_size) {
        (None, _) => Ok(None),
        (Some(region), Some(size)) => Ok(Some((region, offset, size))),
        (Some(_), None) => Err(Failure::bad_request(format!(
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' \
             parameter for tensor '{tensor}'"
        ))),
    }
}

/// One input tensor, from its raw contents when sent (where they lie, when they can be read
/// there), else from its typed contents.
fn read(model: &str, input: &InferInputTensor, raw: Option<Bytes>) -> Result<Input, Failure> {
    let at = |msg: String| Failure::bad_request(format!("input {}: {msg}", input.name));
    let (datatype, shape) = crate::kserve::input_type(&input.name, &input.datatype, &input.shape)?;
    match (raw, &input.contents) {
        (Some(_), Some(_)) => Err(Failure::bad_request(format!(
            "contents field must not be specified when using raw_input_contents \
             for '{}' for model '{model}'",
            input.name
        ))),
        (Some(bytes), None) => tensor::in_place(datatype, &shape, Place::Body(bytes)).map_err(at),
        (None, contents) => {
            let none = InferTensorContents::default();
            let leaves = typed(datatype, contents.as_ref().unwrap_or(&none)).map_err(at)?;
            tensor::from_json(datatype, &shape, &leaves.iter().collect::<Vec<_>>(), false)
                .map(Input::Tensor)
                .map_err(at)
        }
    }
}

/// The elements of the `contents` field that carries `datatype`, checked for its range by
/// `tensor::from_json` as JSON's are.
fn typed(datatype: DataType, c: &InferTensorContents) -> Result<Vec<Value>, String> {
    fn all<T: Copy + Into<Value>>(v: &[T]) -> Vec<Value> {
        v.iter().map(|&x| x.into()).collect()
    }
    Ok(match datatype {
        DataType::Bool => all(&c.bool_contents),
        DataType::Int8 | DataType::Int16 | DataType::Int32 => all(&c.int_contents),
        DataType::Int64 => all(&c.int64_contents),
        DataType::Uint8 | DataType::Uint16 | DataType::Uint32 => all(&c.uint_contents),
        DataType::Uint64 => all(&c.uint64_contents),
        DataType::Fp32 => all(&c.fp32_contents),
        DataType::Fp64 => all(&c.fp64_contents),
        DataType::Bytes => c
            .bytes_contents
            .iter()
            .map(|b| {
                String::from_utf8(b.clone())
                    .map(Value::from)
                    .map_err(|_| "BYTES elements must be UTF-8 text".to_owned())
            })
            .collect::<Result<_, _>>()?,
        // The protocol has no typed field for FP16.
        DataType::Fp16 => {
            return Err("FP16 data must be sent in raw_input_contents".into());
        }
    })
}

/// The outputs to answer: those requested, in their order, or else all the model's; each
/// an index into the model's outputs, with the count of its top classes when asked for its
/// classification (`class_count` in tritonclient) rather than its tensor, or the shared
/// memory slot it is written to.
fn wanted(
    s: &Served,
    model: &crate::Model,
    requested: &[InferRequestedOutputTensor],
) -> Result<Vec<Wanted>, Failure> {
    let outputs = &model.outputs;
    // Always the raw bytes: gRPC has no JSON form.
    let wanted = |output, classification, shared| Wanted {
        output,
        binary: true,
        classification,
        shared,
    };
    if requested.is_empty() {
        return Ok((0..outputs.len()).map(|o| wanted(o, None, None)).collect());
    }
    requested
        .iter()
        .map(|r| {
            let output = crate::kserve::output_index(outputs, &s.name, &r.name)?;
            let classes = match r.parameters.get("classification") {
                None => None,
                Some(p) => Some(
                    match p.parameter_choice {
                        Some(ParameterChoice::Int64Param(k)) => usize::try_from(k).ok(),
                        _ => None,
                    }
                    .ok_or_else(|| {
                        Failure::bad_request(format!(
                            "output '{}': classification must be a count of classes",
                            r.name
                        ))
                    })?,
                ),
            };
            let shared = match shared_memory(&r.name, &r.parameters)? {
                None => None,
                Some(_) if classes.is_some() => {
                    return Err(Failure::bad_request(
                        "output can't set both 'shared_memory_region' and 'classification'",
                    ));
                }
                Some((region, offset, size)) => Some(s.shared_memory.slot(region, offset, size)?),
            };
            Ok(wanted(output, classes, shared))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(datatype: &str, contents: Option<InferTensorContents>) -> InferInputTensor {
        InferInputTensor {
            name: "x".into(),
            datatype: datatype.into(),
            shape: vec![2],
            parameters: Default::default(),
            contents,
        }
    }

    /// tritonclient sends raw contents only: the typed fields are checked here, each
    /// against the raw bytes of the same values.
    #[test]
    fn typed_contents_read_as_raw_ones_do() {
        let c = InferTensorContents::default;
        let cases = [
            (
                "BOOL",
                InferTensorContents {
                    bool_contents: vec![true, false],
                    ..c()
                },
            ),
            (
                "INT8",
                InferTensorContents {
                    int_contents: vec![-128, 127],
                    ..c()
                },
            ),
            (
                "INT16",
                InferTensorContents {
                    int_contents: vec![-3, 300],
                    ..c()
                },
            ),
            (
                "INT32",
                InferTensorContents {
                    int_contents: vec![i32::MIN, 7],
                    ..c()
                },
            ),
            (
                "INT64",
                InferTensorContents {
                    int64_contents: vec![i64::MAX, -1],
                    ..c()
                },
            ),
            (
                "UINT8",
                InferTensorContents {
                    uint_contents: vec![0, 255],
                    ..c()
                },
            ),
            (
                "UINT16",
                InferTensorContents {
                    uint_contents: vec![1, 65535],
                    ..c()
                },
            ),
            (
                "UINT32",
                InferTensorContents {
                    uint_contents: vec![u32::MAX, 0],
                    ..c()
                },
            ),
            (
                "UINT64",
                InferTensorContents {
                    uint64_contents: vec![u64::MAX, 1],
                    ..c()
                },
            ),
            (
                "FP32",
                InferTensorContents {
                    fp32_contents: vec![0.1, -2.5],
                    ..c()
                },
            ),
            (
                "FP64",
                InferTensorContents {
                    fp64_contents: vec![0.1, 1e300],
                    ..c()
                },
            ),
            (
                "BYTES",
                InferTensorContents {
                    bytes_contents: vec![b"a".to_vec(), "é".into()],
                    ..c()
                },
            ),
        ];
        for (datatype, contents) in cases {
            let typed = read("m", &input(datatype, Some(contents)), None)
                .unwrap()
                .into_tensor()
                .unwrap();
            let dt = DataType::parse(datatype).unwrap();
            let raw = tensor::to_bytes(&typed, dt).unwrap();
            assert_eq!(
                read("m", &input(datatype, None), Some(raw.into()))
                    .unwrap()
                    .into_tensor()
                    .unwrap(),
                typed,
                "{datatype}"
            );
        }
    }

    #[test]
    fn typed_contents_out_of_range_or_short_or_beside_raw_are_refused() {
        let c = InferTensorContents::default;
        for (datatype, contents) in [
            (
                "INT8",
                InferTensorContents {
                    int_contents: vec![128, 0],
                    ..c()
                },
            ),
            (
                "UINT16",
                InferTensorContents {
                    uint_contents: vec![65536, 0],
                    ..c()
                },
            ),
            (
                "FP32",
                InferTensorContents {
                    fp32_contents: vec![1.0],
                    ..c()
                },
            ),
            (
                "FP16",
                InferTensorContents {
                    fp32_contents: vec![1.0, 2.0],
                    ..c()
                },
            ),
            (
                "BYTES",
                InferTensorContents {
                    bytes_contents: vec![vec![0xff], vec![]],
                    ..c()
                },
            ),
        ] {
            assert!(
                read("m", &input(datatype, Some(contents)), None).is_err(),
                "{datatype}"
            );
        }
        let both = input("FP32", Some(c()));
        let e = read("m", &both, Some(Bytes::from(vec![0; 8])))
            .err()
            .expect("refused");
        assert!(
            e.message.contains("contents field must not be specified"),
            "{e:?}"
        );
    }
}
