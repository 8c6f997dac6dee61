//! TF Serving's JSON: request documents read as its rapidjson reader reads them, `:predict`
//! tensors filled and `:predict` answers written as `util/json_tensor.cc` does, with its
//! error texts (all INVALID_ARGUMENT, so 400).

use serde_json::{Map, Value};
use tract_onnx::prelude::Tensor;

use crate::model::{DataType, TensorSpec};
use crate::{Failure, tensor};
use crate::{Signature, Version};

/// A request body as `ParseJson` reads it: one JSON object, anything after it ignored
/// (`kParseStopWhenDoneFlag`). `NaN` and `Infinity` are refused, where rapidjson's
/// `kParseNanAndInfFlag` takes them: JSON has no such numbers (README).
pub fn parse(body: &[u8]) -> Result<Map<String, Value>, Failure> {
    if body.is_empty() {
        return Err(Failure::bad_request(
            "JSON Parse error: The document is empty",
        ));
    }
    let parse_error = |what: &str, offset: usize| {
        Failure::bad_request(format!("JSON Parse error: {what} at offset: {offset}"))
    };
    match serde_json::Deserializer::from_slice(body)
        .into_iter::<Value>()
        .next()
    {
        None => Err(parse_error("The document is empty.", body.len())),
        Some(Err(e)) => {
            let (what, at_end) = rapidjson_error(&e, body);
            let offset = if at_end {
                body.len()
            } else {
                let line_start: usize = body
                    .split_inclusive(|b| *b == b'\n')
                    .take(e.line().saturating_sub(1))
                    .map(<[u8]>::len)
                    .sum();
                line_start + e.column().saturating_sub(1)
            };
            Err(parse_error(what, offset))
        }
        Some(Ok(Value::Object(doc))) => Ok(doc),
        Some(Ok(other)) => Err(format_error(&other, "Is not object")),
    }
}

/// rapidjson's words (`GetParseError_En`) for serde_json's error, and whether it is at the
/// end of the body.
fn rapidjson_error(e: &serde_json::Error, body: &[u8]) -> (&'static str, bool) {
    let said = e.to_string();
    let last = body
        .iter()
        .rev()
        .find(|b| !b.is_ascii_whitespace())
        .copied();
    let what = match said.split(" at line ").next().unwrap_or_default() {
        "EOF while parsing a list" if matches!(last, Some(b'[' | b',')) => "Invalid value.",
        "EOF while parsing a list" => "Missing a comma or ']' after an array element.",
        "EOF while parsing an object" if matches!(last, Some(b'{' | b',')) => {
            "Missing a name for object member."
        }
        "EOF while parsing an object" if last == Some(b':') => "Invalid value.",
        "EOF while parsing an object" => "Missing a comma or '}' after an object member.",
        "EOF while parsing a string" => "Missing a closing quotation mark in string.",
        "expected `:`" => "Missing a colon after a name of object member.",
        "expected `,` or `]`" => "Missing a comma or ']' after an array element.",
        "expected `,` or `}`" => "Missing a comma or '}' after an object member.",
        "key must be a string" => "Missing a name for object member.",
        "invalid escape" => "Invalid escape character in string.",
        "invalid unicode code point" | "lone leading surrogate in hex escape" => {
            "The surrogate pair in string is invalid."
        }
        "unexpected end of hex escape" => "Incorrect hex digit after \\u escape in string.",
        "number out of range" => "Number too big to be stored in double.",
        s if s.starts_with("control character") => "Invalid encoding in string.",
        _ => "Invalid value.",
    };
    (what, e.is_eof())
}

/// `FormatError`: the whole document, as its debug string, then what is wrong.
pub fn format_error(doc: &Value, what: &str) -> Failure {
    Failure::bad_request(format!("JSON Value: {} {what}", debug_string(doc)))
}

/// The request's `signature_name` (`FillSignature`): a string where given.
pub fn signature_name(doc: &Map<String, Value>) -> Result<Option<&str>, Failure> {
    match doc.get("signature_name") {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Failure::bad_request(format!(
            "JSON Value: {} not formatted correctly. 'signature_name' key must be a string \
             value.",
            debug_string(&Value::Object(doc.clone()))
        ))),
    }
}

/// `JsonValueToDebugString`: rapidjson's PrettyWriter (4-space indent, arrays on one line),
/// stopped at the first token that starts past 256 bytes.
pub fn debug_string(v: &Value) -> String {
    let mut w = DebugWriter::default();
    w.value(v);
    w.out
}

#[derive(Default)]
struct DebugWriter {
    out: String,
    /// Per open container: whether it is an array, and the values (keys too) written in it.
    levels: Vec<(bool, usize)>,
}

impl DebugWriter {
    /// Writes one token, unless the limit is already reached.
    fn token(&mut self, text: &str) -> bool {
        if self.out.len() >= 256 {
            return false;
        }
        self.out.push_str(text);
        true
    }

    /// PrettyWriter's `PrettyPrefix`: what goes before a value or key.
    fn prefix(&mut self) {
        let depth = self.levels.len();
        let Some((in_array, count)) = self.levels.last_mut() else {
            return;
        };
        if *in_array {
            if *count > 0 {
                self.out.push_str(", ");
            }
        } else {
            self.out.push_str(match *count {
                0 => "\n",
                n if n % 2 == 0 => ",\n",
                _ => ": ",
            });
            if *count % 2 == 0 {
                self.out.push_str(&" ".repeat(4 * depth));
            }
        }
        *count += 1;
    }

    fn scalar(&mut self, text: &str) -> bool {
        if self.out.len() >= 256 {
            return false;
        }
        self.prefix();
        self.out.push_str(text);
        true
    }

    fn value(&mut self, v: &Value) -> bool {
        match v {
            Value::Array(items) => {
                if !self.scalar("[") {
                    return false;
                }
                self.levels.push((true, 0));
                for item in items {
                    if !self.value(item) {
                        return false;
                    }
                }
                self.levels.pop();
                self.token("]")
            }
            Value::Object(members) => {
                if !self.scalar("{") {
                    return false;
                }
                self.levels.push((false, 0));
                for (k, item) in members {
                    if !self.scalar(&Value::from(k.as_str()).to_string()) || !self.value(item) {
                        return false;
                    }
                }
                let (_, count) = self.levels.pop().unwrap_or_default();
                if count > 0 && self.out.len() < 256 {
                    self.out.push('\n');
                    self.out.push_str(&" ".repeat(4 * self.levels.len()));
                }
                self.token("}")
            }
            scalar => self.scalar(&scalar.to_string()),
        }
    }
}

/// rapidjson's name of a value's type (`JsonTypeString`).
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "Null",
        Value::Bool(false) => "False",
        Value::Bool(true) => "True",
        Value::Object(_) => "Object",
        Value::Array(_) => "Array",
        Value::String(_) => "String",
        Value::Number(_) => "Number",
    }
}

/// `{"b64": "…"}`: a value, not an object of named inputs (`IsValBase64Object`).
pub fn is_b64(v: &Value) -> bool {
    matches!(v, Value::Object(o) if o.len() == 1 && o.get("b64").is_some_and(Value::is_string))
}

/// TensorFlow's name of a datatype (`DataTypeString`).
pub fn tf_name(datatype: DataType) -> &'static str {
    match datatype {
        DataType::Bool => "bool",
        DataType::Uint8 => "uint8",
        DataType::Uint16 => "uint16",
        DataType::Uint32 => "uint32",
        DataType::Uint64 => "uint64",
        DataType::Int8 => "int8",
        DataType::Int16 => "int16",
        DataType::Int32 => "int32",
        DataType::Int64 => "int64",
        DataType::Fp16 => "half",
        DataType::Fp32 => "float",
        DataType::Fp64 => "double",
        DataType::Bytes => "string",
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

/// A tensor being filled: its shape and its leaves, row-major.
struct Filled<'a> {
    shape: Vec<usize>,
    leaves: Vec<&'a Value>,
}

/// `GetDenseTensorShape` then `FillTensorProto`: the shape the first items give, and every
/// leaf at the level and list sizes that shape says, of the input's type.
fn fill(v: &Value, datatype: DataType) -> Result<Filled<'_>, String> {
    let shape = crate::tensor::first_items_shape(v);
    let mut leaves = Vec::new();
    fill_level(v, 0, &shape, datatype, &mut leaves)?;
    Ok(Filled { shape, leaves })
}

fn fill_level<'a>(
    v: &'a Value,
    level: usize,
    shape: &[usize],
    datatype: DataType,
    leaves: &mut Vec<&'a Value>,
) -> Result<(), String> {
    let rank = shape.len();
    let Value::Array(items) = v else {
        if level != rank {
            return Err(format!(
                "JSON Value: {} found at incorrect level: {} in the JSON DOM. Expected at \
                 level: {rank}",
                debug_string(v),
                level + 1
            ));
        }
        check_leaf(v, datatype)?;
        leaves.push(v);
        return Ok(());
    };
    if level >= rank {
        return Err(format!(
            "Encountered list at unexpected level: {level} expected < {rank}"
        ));
    }
    if items.len() != shape[level] {
        return Err(format!(
            "Encountered list at unexpected size: {} at level: {level} expected size: {}",
            items.len(),
            shape[level]
        ));
    }
    items
        .iter()
        .try_for_each(|item| fill_level(item, level + 1, shape, datatype, leaves))
}

/// `AddValueToTensor`'s type check of one leaf (`TypeError`, `Base64FormatError`).
fn check_leaf(v: &Value, datatype: DataType) -> Result<(), String> {
    let fits = match datatype {
        DataType::Fp16 | DataType::Fp32 | DataType::Fp64 => v.is_number(),
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Uint8 => {
            v.as_i64().is_some_and(|i| i32::try_from(i).is_ok())
        }
        DataType::Uint16 | DataType::Uint32 => v.as_u64().is_some_and(|i| u32::try_from(i).is_ok()),
        DataType::Int64 => v.as_i64().is_some(),
        DataType::Uint64 => v.as_u64().is_some(),
        DataType::Bool => v.is_boolean(),
        DataType::Bytes if v.is_object() && !is_b64(v) => {
            return Err(format!(
                "JSON Value: {} not formatted correctly for base64 data",
                debug_string(v)
            ));
        }
        DataType::Bytes => v.is_string() || is_b64(v),
    };
    if fits {
        Ok(())
    } else {
        Err(format!(
            "JSON Value: {} Type: {} is not of expected type: {}",
            debug_string(v),
            type_name(v),
            tf_name(datatype)
        ))
    }
}

/// `ShapeToString`: `[2,3]`.
pub fn shape_string(shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    format!("[{}]", dims.join(","))
}

/// A `:predict` body read against the inputs of a file's one signature: its format and
/// its named tensors.
pub fn decode(
    specs: &[TensorSpec],
    body: &[u8],
) -> Result<(Format, Vec<(String, Tensor)>), Failure> {
    let doc = parse(body)?;
    if let Some(name) = signature_name(&doc)?
        && !name.is_empty()
        && name != crate::DEFAULT_SIGNATURE
    {
        return Err(no_signature(name));
    }
    tensors(specs, doc)
}

/// `GetInfoMap`: the version's signature of that name (an empty name is
/// `serving_default`).
pub fn signature<'v>(version: &'v Version, name: &str) -> Result<&'v Signature, Failure> {
    version.signature(name).ok_or_else(|| no_signature(name))
}

fn no_signature(name: &str) -> Failure {
    Failure::bad_request(format!(
        "Serving signature name: \"{name}\" not found in signature def"
    ))
}

/// `FillPredictRequestFromJson` past the signature: the tensors from `instances` or
/// `inputs`, then the predictor's check that every input is given.
pub fn tensors(
    specs: &[TensorSpec],
    doc: Map<String, Value>,
) -> Result<(Format, Vec<(String, Tensor)>), Failure> {
    if specs.is_empty() {
        return Err(Failure::bad_request(
            "Failed to get input map for signature: DEFAULT",
        ));
    }
    let (format, filled) = match (doc.get("instances"), doc.get("inputs")) {
        (Some(_), Some(_)) => {
            return Err(format_error(
                &Value::Object(doc),
                "Not formatted correctly expecting only one of 'inputs' or 'instances' keys \
                 to exist ",
            ));
        }
        (Some(Value::Array(instances)), None) if !instances.is_empty() => {
            (Format::Rows, rows(instances, specs)?)
        }
        (Some(Value::Array(_)), None) => {
            return Err(format_error(
                &Value::Object(doc),
                "No values in 'instances' array",
            ));
        }
        (Some(_), None) => {
            return Err(format_error(
                &Value::Object(doc),
                "Expecting 'instances' to be an list/array",
            ));
        }
        (None, Some(inputs)) => (Format::Columns, columns(inputs, specs)?),
        (None, None) => {
            return Err(Failure::bad_request("Missing 'inputs' or 'instances' key"));
        }
    };
    super::verify_inputs_size(filled.iter().map(|(s, _)| s.name.as_str()), specs)?;
    let tensors = filled
        .into_iter()
        .map(|(spec, f)| {
            tensor::from_json(spec.datatype, &f.shape, &f.leaves, true)
                .map(|t| (spec.name.clone(), t))
                .map_err(|e| Failure::bad_request(format!("input {}: {e}", spec.name)))
        })
        .collect::<Result<_, _>>()?;
    Ok((format, tensors))
}

fn find<'s>(specs: &'s [TensorSpec], name: &str) -> Option<&'s TensorSpec> {
    specs.iter().find(|s| s.name == name)
}

/// `FillTensorMapFromInstancesList`: instances stacked along a new first dimension.
fn rows<'a>(
    instances: &'a [Value],
    specs: &'a [TensorSpec],
) -> Result<Vec<(&'a TensorSpec, Filled<'a>)>, Failure> {
    let bad = |message: String| Failure::bad_request(message);
    if !instances[0].is_object() && specs.len() > 1 {
        return Err(bad(
            "instances is a plain list, but expecting list of objects as multiple \
                        input tensors required as per tensorinfo_map"
                .into(),
        ));
    }
    let is_element_object = |v: &Value| v.is_object() && !is_b64(v);
    let objects = is_element_object(&instances[0]);
    let mut names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    let mut stacked: Vec<(&TensorSpec, Filled<'a>)> = Vec::new();
    for (i, elem) in instances.iter().enumerate() {
        if objects {
            let Value::Object(members) = elem else {
                return Err(bad(format!(
                    "Expecting object but got list at item {i} of input list"
                )));
            };
            if is_b64(elem) {
                return Err(bad(format!(
                    "Expecting object but got list at item {i} of input list"
                )));
            }
            for (name, v) in members {
                add_instance_item(v, name, specs, &mut stacked).map_err(|e| {
                    bad(format!(
                        "Failed to process element: {i} key: {name} of 'instances' list. \
                         Error: INVALID_ARGUMENT: {e}"
                    ))
                })?;
            }
            if !members.keys().map(String::as_str).eq(names.iter().copied()) {
                return Err(bad(format!(
                    "Failed to process element: {i} of 'instances' list. JSON object: {} \
                     keys must be equal to: {}",
                    debug_string(elem),
                    names.join(",")
                )));
            }
        } else {
            if is_element_object(elem) {
                return Err(bad(format!(
                    "Expecting value/list but got object at item {i} of input list"
                )));
            }
            add_instance_item(elem, &specs[0].name, specs, &mut stacked).map_err(|e| {
                bad(format!(
                    "Failed to process element: {i} of 'instances' list. Error: \
                     INVALID_ARGUMENT: {e}"
                ))
            })?;
        }
    }
    for (_, filled) in &mut stacked {
        filled.shape.insert(0, instances.len());
    }
    Ok(stacked)
}

/// `AddInstanceItem`: one instance's value of input `name`, which must have the shape of
/// the first instance's.
fn add_instance_item<'a>(
    v: &'a Value,
    name: &str,
    specs: &'a [TensorSpec],
    stacked: &mut Vec<(&'a TensorSpec, Filled<'a>)>,
) -> Result<(), String> {
    let spec = find(specs, name)
        .ok_or_else(|| format!("JSON object: does not have named input: {name}"))?;
    let item = fill(v, spec.datatype)?;
    match stacked.iter_mut().find(|(s, _)| s.name == name) {
        None => stacked.push((spec, item)),
        Some((_, first)) => {
            let size: usize = first.shape.iter().product();
            if item.leaves.len() != size {
                return Err(format!(
                    "Expecting tensor size: {size} but got: {}",
                    item.leaves.len()
                ));
            }
            if item.shape != first.shape {
                return Err(format!(
                    "Expecting shape {} but got: {}",
                    shape_string(&first.shape),
                    shape_string(&item.shape)
                ));
            }
            first.leaves.extend(item.leaves);
        }
    }
    Ok(())
}

/// `FillTensorMapFromInputsMap`: each input's whole tensor; names the model lacks are
/// ignored, as TF Serving ignores them.
fn columns<'a>(
    inputs: &'a Value,
    specs: &'a [TensorSpec],
) -> Result<Vec<(&'a TensorSpec, Filled<'a>)>, Failure> {
    let bad = |message: String| Failure::bad_request(message);
    match inputs {
        Value::Object(named) if !is_b64(inputs) => {
            let mut sorted: Vec<&TensorSpec> = specs.iter().collect();
            sorted.sort_by(|a, b| a.name.cmp(&b.name));
            sorted
                .into_iter()
                .map(|spec| {
                    let v = named.get(&spec.name).ok_or_else(|| {
                        bad(format!(
                            "Missing named input: {} in 'inputs' object.",
                            spec.name
                        ))
                    })?;
                    Ok((spec, fill(v, spec.datatype).map_err(bad)?))
                })
                .collect()
        }
        _ if specs.len() > 1 => Err(Failure::bad_request(
            "inputs is a plain value/list, but expecting an object as multiple input tensors \
             required as per tensorinfo_map",
        )),
        _ => Ok(vec![(
            &specs[0],
            fill(inputs, specs[0].datatype).map_err(bad)?,
        )]),
    }
}

/// An output as the answer writes it: its name, and its values nested along its shape.
pub type Written = (String, Value);

/// Each output nested along its whole shape (`AddTensorValues`): floats as `WriteDecimal`
/// writes them, strings as `{"b64": …}` when the output's name ends in `_bytes`.
pub fn written(outputs: &[Tensor], specs: &[TensorSpec]) -> Result<Vec<Written>, Failure> {
    outputs
        .iter()
        .zip(specs)
        .map(|(t, spec)| {
            let datatype = DataType::of(t.datum_type()).unwrap_or(spec.datatype);
            let data = tensor::to_data(t, datatype)
                .map_err(|e| Failure::internal(format!("output {}: {e}", spec.name)))?;
            let value = match data {
                tensor::Data::F32(v) => nest(&mut v.into_iter().map(decimal_f32), t.shape()),
                tensor::Data::F64(v) => nest(&mut v.into_iter().map(decimal_f64), t.shape()),
                other => other.nest(t.shape(), spec.name.ends_with("_bytes")),
            };
            Ok((spec.name.clone(), value))
        })
        .collect()
}

fn nest(leaves: &mut impl Iterator<Item = Value>, shape: &[usize]) -> Value {
    match shape.split_first() {
        None => leaves.next().unwrap_or(Value::Null),
        Some((&n, rest)) => Value::Array((0..n).map(|_| nest(leaves, rest)).collect()),
    }
}

/// `WriteDecimal`: six significant digits where they read back as the same number, else
/// all of them (`max_digits10`); whole numbers as decimals (`1.0`). JSON has no NaN or
/// infinity, so those are `null`, where TF Serving writes `NaN` and `Infinity`.
pub fn decimal_f32(x: f32) -> Value {
    if !x.is_finite() {
        return Value::Null;
    }
    let short = format!("{x:.5e}");
    let text = if short.parse::<f32>() == Ok(x) {
        short
    } else {
        format!("{x:.8e}")
    };
    text.parse::<f64>().map_or(Value::Null, Value::from)
}

fn decimal_f64(x: f64) -> Value {
    if !x.is_finite() {
        return Value::Null;
    }
    let short = format!("{x:.5e}");
    let text = if short.parse::<f64>() == Ok(x) {
        short
    } else {
        format!("{x:.16e}")
    };
    text.parse::<f64>().map_or(Value::Null, Value::from)
}

/// `MakeRowFormatJsonFromTensors`: the outputs split along their first dimension, one
/// value per instance, or one object of named outputs per instance when there are several.
pub fn predictions(outputs: Vec<Written>) -> Result<Value, Failure> {
    let mut columns = Vec::with_capacity(outputs.len());
    let mut batch: Option<usize> = None;
    for (name, v) in outputs {
        let Value::Array(items) = v else {
            return Err(Failure::bad_request(format!(
                "Tensor name: {name} has no shape information "
            )));
        };
        if let Some(expecting) = batch
            && expecting != items.len()
        {
            return Err(Failure::bad_request(format!(
                "Tensor name: {name} has inconsistent batch size: {} expecting: {expecting}",
                items.len()
            )));
        }
        batch = Some(items.len());
        columns.push((name, items.into_iter()));
    }
    if let [(_, items)] = columns.as_mut_slice() {
        return Ok(Value::Array(items.collect()));
    }
    let rows = (0..batch.unwrap_or(0))
        .map(|_| {
            Value::Object(
                columns
                    .iter_mut()
                    .map(|(n, c)| (n.clone(), c.next().unwrap_or_default()))
                    .collect(),
            )
        })
        .collect();
    Ok(Value::Array(rows))
}

/// `MakeColumnarFormatJsonFromTensors`: the one output bare, or an object of them.
pub fn outputs(mut outputs: Vec<Written>) -> Value {
    if outputs.len() == 1 {
        outputs.swap_remove(0).1
    } else {
        Value::Object(outputs.into_iter().collect())
    }
}

#[cfg(test)]
mod tests;
