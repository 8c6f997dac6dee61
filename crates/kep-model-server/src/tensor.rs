//! Tensors to and from what the protocols carry: JSON values (flat or nested) and the
//! binary tensor format (little-endian elements; BYTES as 4-byte length + bytes each).

use base64::Engine as _;
use serde::Serialize;
use serde_json::Value;
use tract_onnx::prelude::tract_ndarray::{ArrayD, IxDyn};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::tract_data::half;

use crate::model::{DataType, Input, Place, TensorInPlace};

/// Nested JSON arrays as a shape and their leaves in row-major order; a scalar has shape
/// `[]`. Ragged nesting is an error.
pub fn flatten(v: &Value) -> Result<(Vec<usize>, Vec<&Value>), String> {
    let shape = first_items_shape(v);
    // No room reserved for the leaves the first items promise: ragged lists promise any
    // number, past memory or `usize`.
    let mut leaves = Vec::new();
    collect(v, &shape, &mut leaves)?;
    Ok((shape, leaves))
}

/// The shape nested lists have if every list is as long as the first at its level.
pub(crate) fn first_items_shape(v: &Value) -> Vec<usize> {
    let mut shape = Vec::new();
    let mut probe = v;
    while let Value::Array(items) = probe {
        shape.push(items.len());
        match items.first() {
            Some(first) => probe = first,
            None => break,
        }
    }
    shape
}

fn collect<'a>(v: &'a Value, shape: &[usize], out: &mut Vec<&'a Value>) -> Result<(), String> {
    match (shape.split_first(), v) {
        (None, Value::Array(_)) => Err("the nested lists are ragged".into()),
        (None, leaf) => {
            out.push(leaf);
            Ok(())
        }
        (Some((&n, rest)), Value::Array(items)) if items.len() == n => {
            items.iter().try_for_each(|item| collect(item, rest, out))
        }
        (Some(_), _) => Err("the nested lists are ragged".into()),
    }
}

/// How many elements `shape` holds: an error past `usize`, which no request can fill.
pub(crate) fn elements(shape: &[usize]) -> Result<usize, String> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| format!("shape {shape:?} holds more elements than there can be"))
}

pub(crate) fn array<T: Datum>(shape: &[usize], data: Vec<T>) -> Result<Tensor, String> {
    // The engine lays a tensor out by strides, which must fit an `isize` even where a zero
    // dimension leaves it empty (found by the `kserve_grpc_request` fuzz target: tract
    // panics on `[…, 868235, 16383, 0]`).
    let strides = shape
        .iter()
        .filter(|&&d| d > 0)
        .try_fold(size_of::<T>().max(1), |n, &d| n.checked_mul(d));
    if strides.is_none_or(|n| n > isize::MAX as usize) {
        return Err(format!(
            "shape {shape:?} holds more elements than there can be"
        ));
    }
    let given = data.len();
    ArrayD::from_shape_vec(IxDyn(shape), data)
        .map(Tensor::from)
        .map_err(|_| format!("{given} values do not fill shape {shape:?}"))
}

/// A tensor of `datatype` and `shape` from JSON leaves. `b64` accepts `{"b64": …}` for
/// BYTES elements, as TF Serving does.
pub fn from_json(
    datatype: DataType,
    shape: &[usize],
    leaves: &[&Value],
    b64: bool,
) -> Result<Tensor, String> {
    let expected = elements(shape)?;
    if leaves.len() != expected {
        return Err(format!(
            "{} values where shape {shape:?} holds {expected}",
            leaves.len()
        ));
    }
    let bad = |v: &Value| format!("{v} is not a {} value", datatype.name());
    let tensor = match datatype {
        DataType::Bool => array(
            shape,
            leaves
                .iter()
                .map(|v| v.as_bool().ok_or_else(|| bad(v)))
                .collect::<Result<Vec<bool>, _>>()?,
        )?,
        DataType::Fp16 | DataType::Fp32 | DataType::Fp64 => {
            let values = leaves
                .iter()
                .map(|v| v.as_f64().ok_or_else(|| bad(v)))
                .collect::<Result<Vec<f64>, _>>()?;
            cast(array(shape, values)?, datatype)?
        }
        DataType::Uint64 => array(
            shape,
            leaves
                .iter()
                .map(|v| v.as_u64().ok_or_else(|| bad(v)))
                .collect::<Result<Vec<u64>, _>>()?,
        )?,
        DataType::Bytes => {
            let values = leaves
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    Value::Object(o) if b64 => {
                        let text = o.get("b64").and_then(Value::as_str).ok_or_else(|| bad(v))?;
                        let bytes = base64::engine::general_purpose::STANDARD
                            .decode(text)
                            .map_err(|e| format!("b64: {e}"))?;
                        String::from_utf8(bytes)
                            .map_err(|_| "BYTES elements must be UTF-8 text".to_owned())
                    }
                    _ => Err(bad(v)),
                })
                .collect::<Result<Vec<String>, _>>()?;
            array(shape, values)?
        }
        int => {
            let (lo, hi) = int_range(int);
            let values = leaves
                .iter()
                .map(|v| {
                    v.as_i64()
                        .filter(|i| (lo..=hi).contains(i))
                        .ok_or_else(|| bad(v))
                })
                .collect::<Result<Vec<i64>, _>>()?;
            cast(array(shape, values)?, int)?
        }
    };
    Ok(tensor)
}

fn int_range(dt: DataType) -> (i64, i64) {
    match dt {
        DataType::Uint8 => (0, u8::MAX.into()),
        DataType::Uint16 => (0, u16::MAX.into()),
        DataType::Uint32 => (0, u32::MAX.into()),
        DataType::Int8 => (i8::MIN.into(), i8::MAX.into()),
        DataType::Int16 => (i16::MIN.into(), i16::MAX.into()),
        DataType::Int32 => (i32::MIN.into(), i32::MAX.into()),
        _ => (i64::MIN, i64::MAX),
    }
}

fn cast(t: Tensor, to: DataType) -> Result<Tensor, String> {
    t.cast_to_dt(to.datum())
        .map(|c| c.into_owned())
        .map_err(|e| format!("{e:#}"))
}

/// A tensor's elements in a JSON answer, flat; floats keep their own precision.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Data {
    Bool(Vec<bool>),
    Int(Vec<i64>),
    Uint(Vec<u64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Text(Vec<String>),
}

/// The tensor's elements as the protocol type `datatype` (the engine's type, cast).
pub fn to_data(t: &Tensor, datatype: DataType) -> Result<Data, String> {
    fn plain<T: Datum + Clone>(t: &Tensor, dt: DatumType) -> Result<Vec<T>, String> {
        let cast = t.cast_to_dt(dt).map_err(|e| format!("{e:#}"))?;
        let view = cast
            .to_plain_array_view::<T>()
            .map_err(|e| format!("{e:#}"))?;
        Ok(view.iter().cloned().collect())
    }
    Ok(match datatype {
        DataType::Bool => Data::Bool(plain(t, DatumType::Bool)?),
        DataType::Fp16 | DataType::Fp32 => Data::F32(plain(t, DatumType::F32)?),
        DataType::Fp64 => Data::F64(plain(t, DatumType::F64)?),
        DataType::Uint64 => Data::Uint(plain(t, DatumType::U64)?),
        DataType::Bytes => Data::Text(plain(t, DatumType::String)?),
        _ => Data::Int(plain(t, DatumType::I64)?),
    })
}

impl Data {
    /// The elements nested along `shape`, as TF Serving answers them; BYTES as `{"b64"}`
    /// when `b64`.
    pub fn nest(&self, shape: &[usize], b64: bool) -> Value {
        let leaves: Vec<Value> = match self {
            Data::Bool(v) => v.iter().map(|x| Value::from(*x)).collect(),
            Data::Int(v) => v.iter().map(|x| Value::from(*x)).collect(),
            Data::Uint(v) => v.iter().map(|x| Value::from(*x)).collect(),
            Data::F32(v) => v.iter().map(|x| json_f32(*x)).collect(),
            Data::F64(v) => v.iter().map(|x| Value::from(*x)).collect(),
            Data::Text(v) if b64 => v
                .iter()
                .map(|s| {
                    serde_json::json!({"b64": base64::engine::general_purpose::STANDARD.encode(s)})
                })
                .collect(),
            Data::Text(v) => v.iter().map(|s| Value::from(s.as_str())).collect(),
        };
        nest(&mut leaves.into_iter(), shape)
    }
}

/// An f32 as the shortest decimal that reads back as the same f32.
fn json_f32(x: f32) -> Value {
    if !x.is_finite() {
        return Value::Null;
    }
    x.to_string()
        .parse::<serde_json::Number>()
        .map_or(Value::Null, Value::Number)
}

fn nest(leaves: &mut impl Iterator<Item = Value>, shape: &[usize]) -> Value {
    match shape.split_first() {
        None => leaves.next().unwrap_or(Value::Null),
        Some((&n, rest)) => Value::Array((0..n).map(|_| nest(leaves, rest)).collect()),
    }
}

/// Elements of `N` little-endian bytes each. On a little-endian host they are the
/// tensor's own layout, copied once into its storage: by way of a `Vec` they were copied
/// twice (16 % of an instance's time for a 602 KB image). Elsewhere `read` is inlined, not
/// a function pointer, so that the loop compiles to a copy.
#[expect(
    unsafe_code,
    reason = "tract builds a tensor from raw bytes only unsafely; see SAFETY"
)]
fn le<T: Datum, const N: usize>(
    shape: &[usize],
    bytes: &[u8],
    read: impl Fn([u8; N]) -> T,
) -> Result<Tensor, String> {
    if cfg!(target_endian = "little") && T::datum_type().is_number() {
        // SAFETY: any `N` bytes are a valid number of `N` bytes, and a little-endian host
        // lays one out as its little-endian bytes. tract refuses a shape whose strides
        // overflow, as `array` does.
        return unsafe { Tensor::from_raw::<T>(shape, bytes) }.map_err(|e| e.to_string());
    }
    let (chunks, _) = bytes.as_chunks::<N>();
    array(shape, chunks.iter().map(|c| read(*c)).collect())
}

/// Checks that `len` bytes are exactly `count` elements of `size` bytes.
fn fits(
    datatype: DataType,
    shape: &[usize],
    count: usize,
    size: usize,
    len: usize,
) -> Result<(), String> {
    if count.checked_mul(size) == Some(len) {
        return Ok(());
    }
    Err(format!(
        "{len} bytes of binary data where shape {shape:?} of {} takes {count} × {size}",
        datatype.name(),
    ))
}

/// An input whose bytes lie in `place`: left there when an engine can read it in place
/// (fixed-size numbers, aligned for their elements, not empty), else decoded as binary data
/// is (BOOL and BYTES are checked element by element).
pub fn in_place(datatype: DataType, shape: &[usize], place: Place) -> Result<Input, String> {
    let count = elements(shape)?;
    let in_place = match (datatype, datatype.size()) {
        (DataType::Bool | DataType::Fp16 | DataType::Bytes, _) | (_, None) => None,
        (_, Some(size)) => Some(size),
    }
    .filter(|&size| count > 0 && (place.bytes().as_ptr() as usize).is_multiple_of(size));
    match in_place {
        Some(size) => {
            fits(datatype, shape, count, size, place.bytes().len())?;
            Ok(Input::InPlace(TensorInPlace {
                datatype,
                shape: shape.to_vec(),
                place,
            }))
        }
        None => from_bytes(datatype, shape, place.bytes()).map(Input::Tensor),
    }
}

/// A tensor from the binary tensor format.
pub fn from_bytes(datatype: DataType, shape: &[usize], bytes: &[u8]) -> Result<Tensor, String> {
    let count = elements(shape)?;
    match datatype.size() {
        Some(size) => {
            fits(datatype, shape, count, size, bytes.len())?;
            match datatype {
                DataType::Bool => {
                    if bytes.iter().any(|b| *b > 1) {
                        return Err("BOOL binary data holds bytes other than 0 and 1".into());
                    }
                    array(shape, bytes.iter().map(|b| *b == 1).collect())
                }
                DataType::Uint8 => le(shape, bytes, u8::from_le_bytes),
                DataType::Uint16 => le(shape, bytes, u16::from_le_bytes),
                DataType::Uint32 => le(shape, bytes, u32::from_le_bytes),
                DataType::Uint64 => le(shape, bytes, u64::from_le_bytes),
                DataType::Int8 => le(shape, bytes, i8::from_le_bytes),
                DataType::Int16 => le(shape, bytes, i16::from_le_bytes),
                DataType::Int32 => le(shape, bytes, i32::from_le_bytes),
                DataType::Int64 => le(shape, bytes, i64::from_le_bytes),
                DataType::Fp16 => le(shape, bytes, half::f16::from_le_bytes),
                DataType::Fp32 => le(shape, bytes, f32::from_le_bytes),
                DataType::Fp64 => le(shape, bytes, f64::from_le_bytes),
                DataType::Bytes => unreachable!("BYTES has no element size"),
            }
        }
        None => {
            // Room for the elements the bytes can hold, each at least its 4-byte length:
            // the shape alone may promise more than memory.
            let mut items = Vec::with_capacity(count.min(bytes.len() / 4));
            let mut rest = bytes;
            while !rest.is_empty() {
                let (len, tail) = rest
                    .split_first_chunk::<4>()
                    .ok_or("BYTES binary data ends inside a length")?;
                let len = u32::from_le_bytes(*len) as usize;
                if tail.len() < len {
                    return Err("BYTES binary data ends inside an element".into());
                }
                let text = String::from_utf8(tail[..len].to_vec())
                    .map_err(|_| "BYTES elements must be UTF-8 text".to_owned())?;
                items.push(text);
                rest = &tail[len..];
            }
            if items.len() != count {
                return Err(format!(
                    "{} BYTES elements where shape {shape:?} holds {count}",
                    items.len()
                ));
            }
            array(shape, items)
        }
    }
}

/// A tensor in the binary tensor format, as the protocol type `datatype`.
pub fn to_bytes(t: &Tensor, datatype: DataType) -> Result<Vec<u8>, String> {
    // Bytes that need not be text (serialized tf.Examples) are blobs.
    if datatype == DataType::Bytes && t.datum_type() == DatumType::Blob {
        let plain = t.try_as_plain_ram().map_err(|e| format!("{e:#}"))?;
        let blobs = plain
            .as_slice::<tract_onnx::prelude::Blob>()
            .map_err(|e| format!("{e:#}"))?;
        let mut out = Vec::new();
        for b in blobs {
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
        return Ok(out);
    }
    if datatype == DataType::Bytes {
        let Data::Text(items) = to_data(t, datatype)? else {
            unreachable!("BYTES data is text")
        };
        let mut out = Vec::new();
        for s in items {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        return Ok(out);
    }
    let cast = t
        .cast_to_dt(datatype.datum())
        .map_err(|e| format!("{e:#}"))?;
    Ok(cast.as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_lists_flatten_row_major_and_ragged_ones_do_not() {
        let v = json!([[1, 2, 3], [4, 5, 6]]);
        let (shape, leaves) = flatten(&v).unwrap();
        assert_eq!(shape, [2, 3]);
        assert_eq!(leaves[3], &json!(4));
        assert!(flatten(&json!([[1, 2], [3]])).is_err());
        assert!(flatten(&json!([[1, 2], 3])).is_err());
        assert_eq!(flatten(&json!(7)).unwrap().0, Vec::<usize>::new());
    }

    #[test]
    fn every_datatype_goes_through_json_and_binary() {
        let cases = [
            (DataType::Bool, json!([true, false])),
            (DataType::Uint8, json!([0, 255])),
            (DataType::Uint16, json!([0, 65535])),
            (DataType::Uint32, json!([0, 4294967295u32])),
            (DataType::Uint64, json!([0, u64::MAX])),
            (DataType::Int8, json!([-128, 127])),
            (DataType::Int16, json!([-32768, 32767])),
            (DataType::Int32, json!([i32::MIN, i32::MAX])),
            (DataType::Int64, json!([i64::MIN, i64::MAX])),
            (DataType::Fp16, json!([0.5, -2.0])),
            (DataType::Fp32, json!([0.1, -3.5])),
            (DataType::Fp64, json!([0.1, 1e300])),
            (DataType::Bytes, json!(["a", "héllo"])),
        ];
        for (dt, values) in cases {
            let (shape, leaves) = flatten(&values).unwrap();
            let t = from_json(dt, &shape, &leaves, false).unwrap();
            assert_eq!(DataType::of(t.datum_type()), Some(dt));
            // As text: FP32 is written with its own shortest digits, not an f64's.
            let written = serde_json::to_string(&to_data(&t, dt).unwrap()).unwrap();
            assert_eq!(written, values.to_string(), "{dt:?}");
            let bytes = to_bytes(&t, dt).unwrap();
            let back = from_bytes(dt, &shape, &bytes).unwrap();
            assert_eq!(back, t, "{dt:?}");
        }
    }

    #[test]
    fn out_of_range_and_mistyped_values_are_refused() {
        let one = |dt, v: Value| from_json(dt, &[1], &[&v], false);
        assert!(one(DataType::Uint8, json!(256)).is_err());
        assert!(one(DataType::Int8, json!(-129)).is_err());
        assert!(one(DataType::Int32, json!(1.5)).is_err());
        assert!(one(DataType::Fp32, json!("1")).is_err());
        assert!(one(DataType::Bool, json!(1)).is_err());
        assert!(from_json(DataType::Fp32, &[2], &[&json!(1.0)], false).is_err());
        let b64 = json!({"b64": "aGk="});
        assert_eq!(
            to_data(
                &from_json(DataType::Bytes, &[1], &[&b64], true).unwrap(),
                DataType::Bytes
            )
            .unwrap(),
            Data::Text(vec!["hi".into()])
        );
        assert!(from_bytes(DataType::Fp32, &[2], &[0; 7]).is_err());
        assert!(from_bytes(DataType::Bytes, &[1], &[5, 0, 0, 0, b'a']).is_err());
        // A shape whose strides pass `isize` is refused; an empty one is not.
        let wide = [1, 2, 1407, 5, 109, 26, 5, 868235, 16383, 0, 0];
        assert!(from_bytes(DataType::Int64, &wide, &[]).is_err());
        assert!(from_bytes(DataType::Int64, &[3, 0], &[]).is_ok_and(|t| t.shape() == [3, 0]));
    }

    #[test]
    fn answers_nest_along_the_shape() {
        let d = Data::F32(vec![0.1, 0.2, 0.3, 0.4]);
        assert_eq!(d.nest(&[2, 2], false), json!([[0.1, 0.2], [0.3, 0.4]]));
        assert_eq!(
            Data::Text(vec!["hi".into()]).nest(&[1], true),
            json!([{"b64": "aGk="}])
        );
    }
}
