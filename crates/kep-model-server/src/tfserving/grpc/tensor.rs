//! `TensorProto`s to and from the engine's tensors, as TensorFlow's `Tensor::FromProto` reads
//! them and `Tensor::AsProtoField` writes them (`core/framework/tensor.cc`).

use tract_onnx::prelude::{Datum, Tensor};
use tract_onnx::tract_core::tract_data::half::f16;

use super::tensorflow::tensor_shape_proto::Dim;
use super::tensorflow::{DataType as Dt, TensorProto, TensorShapeProto};
use crate::model::DataType;
use crate::tensor::{self, Data};

/// TensorFlow's type for a datatype.
pub fn dtype(datatype: DataType) -> Dt {
    match datatype {
        DataType::Bool => Dt::DtBool,
        DataType::Uint8 => Dt::DtUint8,
        DataType::Uint16 => Dt::DtUint16,
        DataType::Uint32 => Dt::DtUint32,
        DataType::Uint64 => Dt::DtUint64,
        DataType::Int8 => Dt::DtInt8,
        DataType::Int16 => Dt::DtInt16,
        DataType::Int32 => Dt::DtInt32,
        DataType::Int64 => Dt::DtInt64,
        DataType::Fp16 => Dt::DtHalf,
        DataType::Fp32 => Dt::DtFloat,
        DataType::Fp64 => Dt::DtDouble,
        DataType::Bytes => Dt::DtString,
    }
}

/// `DataTypeString`: `DT_FLOAT` is `float`.
pub fn type_string(dt: Dt) -> String {
    dt.as_str_name()
        .trim_start_matches("DT_")
        .to_ascii_lowercase()
}

/// A fed tensor: one the engine takes, or one of a TensorFlow type it has no use for
/// (complex, quantized…), which only the session's type check then names.
pub enum Fed {
    Tensor(Tensor),
    Other(Dt),
}

/// `Tensor::FromProto`; `None` where TensorFlow's fails (`tensor parsing error`): no valid
/// type, a shape with a negative size or too many dimensions, or `tensor_content` of another
/// size than the shape's. Without `tensor_content` the typed values fill the tensor, the last
/// one repeated past their end, zeros when there are none.
pub fn from_proto(p: &TensorProto) -> Option<Fed> {
    let dims = p.tensor_shape.as_ref().map_or(&[][..], |s| &s.dim[..]);
    if dims.len() > 254 || dims.iter().any(|d| d.size < 0) {
        return None;
    }
    let shape: Vec<usize> = dims.iter().map(|d| d.size as usize).collect();
    let n = tensor::elements(&shape).ok()?;
    let dt = Dt::try_from(p.dtype)
        .ok()
        .filter(|d| *d != Dt::DtInvalid && (*d as i32) < 100)?;
    let Some(datatype) = DataType::ALL.into_iter().find(|d| dtype(*d) == dt) else {
        return Some(Fed::Other(dt));
    };
    let content = &p.tensor_content;
    let t = if datatype == DataType::Bytes {
        let items = if content.is_empty() {
            filled(&p.string_val, n)
        } else {
            string_list(content, n)?
        };
        let text = items
            .into_iter()
            .map(String::from_utf8)
            .collect::<Result<_, _>>();
        tensor::array(&shape, text.ok()?).ok()?
    } else if !content.is_empty() {
        // Little-endian, as TensorFlow's memcpy on the hosts it runs on.
        if datatype == DataType::Bool {
            let values = (content.len() == n).then(|| content.iter().map(|b| *b != 0))?;
            tensor::array(&shape, values.collect()).ok()?
        } else {
            tensor::from_bytes(datatype, &shape, content).ok()?
        }
    } else {
        typed(p, datatype, &shape, n)?
    };
    Some(Fed::Tensor(t))
}

/// `FromProtoField`: `n` values from `values`, the last repeated, or defaults.
fn filled<T: Clone + Default>(values: &[T], n: usize) -> Vec<T> {
    let mut out: Vec<T> = values.iter().take(n).cloned().collect();
    let last = values.last().cloned().unwrap_or_default();
    out.resize(n, last);
    out
}

fn typed(p: &TensorProto, datatype: DataType, shape: &[usize], n: usize) -> Option<Tensor> {
    fn make<T: Datum>(shape: &[usize], values: Vec<T>) -> Option<Tensor> {
        tensor::array(shape, values).ok()
    }
    // Narrow integers and halves travel in wider fields, cast back as TensorFlow casts them.
    let ints = || filled(&p.int_val, n);
    match datatype {
        DataType::Bool => make(shape, filled(&p.bool_val, n)),
        DataType::Uint8 => make(shape, ints().into_iter().map(|v| v as u8).collect()),
        DataType::Uint16 => make(shape, ints().into_iter().map(|v| v as u16).collect()),
        DataType::Int8 => make(shape, ints().into_iter().map(|v| v as i8).collect()),
        DataType::Int16 => make(shape, ints().into_iter().map(|v| v as i16).collect()),
        DataType::Int32 => make(shape, ints()),
        DataType::Uint32 => make(shape, filled(&p.uint32_val, n)),
        DataType::Uint64 => make(shape, filled(&p.uint64_val, n)),
        DataType::Int64 => make(shape, filled(&p.int64_val, n)),
        DataType::Fp16 => make(
            shape,
            filled(&p.half_val, n)
                .into_iter()
                .map(|v| f16::from_bits(v as u16))
                .collect(),
        ),
        DataType::Fp32 => make(shape, filled(&p.float_val, n)),
        DataType::Fp64 => make(shape, filled(&p.double_val, n)),
        DataType::Bytes => None,
    }
}

/// `DecodeStringList` (`core/platform/tensor_coding.cc`): `n` varint32 lengths, then the
/// strings.
fn string_list(content: &[u8], n: usize) -> Option<Vec<Vec<u8>>> {
    let mut rest = content;
    let mut lengths = Vec::with_capacity(n.min(content.len()));
    for _ in 0..n {
        let mut len = 0u64;
        let mut shift = 0;
        loop {
            let (&b, tail) = rest.split_first()?;
            rest = tail;
            len |= u64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
            if shift > 28 {
                return None;
            }
        }
        lengths.push(len as usize);
    }
    let mut items = Vec::with_capacity(lengths.len());
    for len in lengths {
        let (item, tail) = rest.split_at_checked(len)?;
        items.push(item.to_vec());
        rest = tail;
    }
    rest.is_empty().then_some(items)
}

/// `Tensor::AsProtoField`: the type, the shape and the values in the type's field.
pub fn to_proto(t: &Tensor, datatype: DataType) -> Result<TensorProto, String> {
    let mut p = TensorProto {
        dtype: dtype(datatype) as i32,
        tensor_shape: Some(TensorShapeProto {
            dim: t
                .shape()
                .iter()
                .map(|&size| Dim {
                    size: size as i64,
                    name: String::new(),
                })
                .collect(),
            unknown_rank: false,
        }),
        ..TensorProto::default()
    };
    match (tensor::to_data(t, datatype)?, datatype) {
        (Data::Bool(v), _) => p.bool_val = v,
        (Data::F32(v), DataType::Fp16) => {
            p.half_val = v
                .into_iter()
                .map(|x| i32::from(f16::from_f32(x).to_bits()))
                .collect();
        }
        (Data::F32(v), _) => p.float_val = v,
        (Data::F64(v), _) => p.double_val = v,
        (Data::Uint(v), _) => p.uint64_val = v,
        (Data::Text(v), _) => p.string_val = v.into_iter().map(String::into_bytes).collect(),
        (Data::Int(v), DataType::Int64) => p.int64_val = v,
        (Data::Int(v), DataType::Uint32) => {
            p.uint32_val = v.into_iter().map(|x| x as u32).collect()
        }
        (Data::Int(v), _) => p.int_val = v.into_iter().map(|x| x as i32).collect(),
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proto(dt: Dt, shape: &[i64]) -> TensorProto {
        TensorProto {
            dtype: dt as i32,
            tensor_shape: Some(TensorShapeProto {
                dim: shape
                    .iter()
                    .map(|&size| Dim {
                        size,
                        name: String::new(),
                    })
                    .collect(),
                unknown_rank: false,
            }),
            ..TensorProto::default()
        }
    }

    fn fed(p: &TensorProto) -> Tensor {
        match from_proto(p) {
            Some(Fed::Tensor(t)) => t,
            _ => panic!("not read"),
        }
    }

    #[test]
    fn values_fill_the_shape_as_tensorflow_fills_it() {
        let mut p = proto(Dt::DtFloat, &[2, 2]);
        p.float_val = vec![1.0, 2.0];
        assert_eq!(
            tensor::to_data(&fed(&p), DataType::Fp32).unwrap(),
            Data::F32(vec![1.0, 2.0, 2.0, 2.0])
        );
        p.float_val.clear();
        assert_eq!(
            tensor::to_data(&fed(&p), DataType::Fp32).unwrap(),
            Data::F32(vec![0.0; 4])
        );
        p.tensor_content = [1.5f32, 2.5, 3.5, 4.5]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(
            tensor::to_data(&fed(&p), DataType::Fp32).unwrap(),
            Data::F32(vec![1.5, 2.5, 3.5, 4.5])
        );
        p.tensor_content.pop();
        assert!(from_proto(&p).is_none());
        assert!(from_proto(&proto(Dt::DtFloat, &[-1, 2])).is_none());
        assert!(from_proto(&proto(Dt::DtInvalid, &[1])).is_none());
        assert!(matches!(
            from_proto(&proto(Dt::DtComplex64, &[1])),
            Some(Fed::Other(Dt::DtComplex64))
        ));
    }

    #[test]
    fn strings_come_as_values_or_as_an_encoded_list() {
        let mut p = proto(Dt::DtString, &[2]);
        p.string_val = vec![b"a".to_vec(), b"bc".to_vec()];
        let want = Data::Text(vec!["a".into(), "bc".into()]);
        assert_eq!(tensor::to_data(&fed(&p), DataType::Bytes).unwrap(), want);
        p.string_val.clear();
        p.tensor_content = b"\x01\x02abc".to_vec();
        assert_eq!(tensor::to_data(&fed(&p), DataType::Bytes).unwrap(), want);
        p.tensor_content.push(b'd');
        assert!(from_proto(&p).is_none());
    }

    #[test]
    fn every_datatype_goes_through_its_field() {
        for datatype in DataType::ALL {
            let mut p = proto(dtype(datatype), &[2]);
            match datatype {
                DataType::Bytes => p.string_val = vec![b"x".to_vec(), b"y".to_vec()],
                DataType::Bool => p.bool_val = vec![true, false],
                _ => {
                    p.tensor_content = tensor::to_bytes(
                        &tensor::from_json(
                            datatype,
                            &[2],
                            &[&serde_json::json!(1), &serde_json::json!(0)],
                            false,
                        )
                        .unwrap(),
                        datatype,
                    )
                    .unwrap()
                }
            }
            let t = fed(&p);
            let written = to_proto(&t, datatype).unwrap();
            assert_eq!(written.dtype, p.dtype, "{datatype:?}");
            let again = fed(&written);
            assert_eq!(again, t, "{datatype:?}");
        }
    }
}
