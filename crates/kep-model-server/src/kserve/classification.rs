//! Triton's classification extension: an output asked for with `"classification": k` is
//! answered as its top k classes, BYTES elements `"<score>:<index>"`, best first. The
//! served model has no batch dimension (`max_batch_size` 0), so, as Triton does for such a
//! model, the classes are taken over the whole tensor and the answer's shape is `[k]`.

use tract_onnx::prelude::*;

use crate::Failure;
use crate::model::DataType;

/// Triton refuses larger outputs: sorting them is pathological.
const MAX_ELEMENTS: usize = 1_000_000;

/// The top `k` classes of `t` (fewer when it has fewer elements).
pub fn top(t: &Tensor, k: usize) -> Result<Tensor, Failure> {
    let datatype = DataType::of(t.datum_type());
    if matches!(
        datatype,
        None | Some(DataType::Bytes | DataType::Bool | DataType::Fp16)
    ) {
        return Err(Failure::bad_request(format!(
            "class result not available for output due to unsupported type '{}'",
            datatype.map_or("INVALID", DataType::name)
        )));
    }
    if t.len() > MAX_ELEMENTS {
        return Err(Failure::bad_request(
            "classification output tensor too large",
        ));
    }
    let scores = t
        .cast_to::<f64>()
        .map_err(|e| Failure::internal(format!("{e:#}")))?;
    let scores: Vec<f64> = scores
        .to_plain_array_view::<f64>()
        .map_err(|e| Failure::internal(format!("{e:#}")))?
        .iter()
        .copied()
        .collect();
    let mut order: Vec<usize> = (0..scores.len()).collect();
    // Stable, so equal scores keep the lower index first, as Triton's sort leaves them.
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let classes: Vec<String> = order
        .into_iter()
        .take(k)
        .map(|i| format!("{}:{i}", score_text(scores[i], datatype)))
        .collect();
    Ok(tract_ndarray::Array1::from(classes).into_dyn().into())
}

/// A score as C++'s `std::to_string` writes it, Triton's form: floats with six decimals,
/// integers as they are.
fn score_text(score: f64, datatype: Option<DataType>) -> String {
    match datatype {
        Some(DataType::Fp32 | DataType::Fp64) => format!("{score:.6}"),
        _ => format!("{score}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(t: &Tensor) -> Vec<String> {
        t.to_plain_array_view::<String>()
            .unwrap()
            .iter()
            .cloned()
            .collect()
    }

    #[test]
    fn the_top_classes_come_best_first_in_tritons_form() {
        let t = Tensor::from_shape(&[2, 3], &[0.1f32, 0.7, 0.2, 0.05, 0.9, 0.3]).unwrap();
        let best = top(&t, 2).unwrap();
        assert_eq!(best.shape(), &[2]);
        assert_eq!(strings(&best), ["0.900000:4", "0.700000:1"]);
        // At most as many classes as elements.
        assert_eq!(top_len(&t, 10), 6);
        assert_eq!(top_len(&t, 0), 0);
        let ints = Tensor::from_shape(&[3], &[3i64, 9, 9]).unwrap();
        assert_eq!(strings(&top(&ints, 3).unwrap()), ["9:1", "9:2", "3:0"]);
    }

    fn top_len(t: &Tensor, k: usize) -> usize {
        top(t, k).unwrap().len()
    }

    #[test]
    fn text_is_refused_as_triton_refuses_it() {
        let t: Tensor = tract_ndarray::arr1(&["a".to_owned()]).into_dyn().into();
        let e = top(&t, 1).unwrap_err();
        assert!(
            format!("{e:?}").contains("unsupported type 'BYTES'"),
            "{e:?}"
        );
    }
}
