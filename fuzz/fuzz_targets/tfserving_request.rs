//! `POST /v1/models/{m}:predict` bodies, read by `kep_model_server::tfserving::decode`, which
//! the handler calls before the model runs, against two models: one of a single input
//! (bare values) and one with an input of every datatype (named inputs).
#![no_main]

use std::sync::LazyLock;

use axum::response::IntoResponse as _;
use kep_fuzz::models;
use kep_model_server::TensorSpec;
use kep_model_server::tfserving::{Format, decode};
use libfuzzer_sys::fuzz_target;

static INPUTS: LazyLock<[Vec<TensorSpec>; 2]> =
    LazyLock::new(|| [models::one_input(), models::every_datatype()]);

fuzz_target!(|data: &[u8]| {
    for specs in INPUTS.iter() {
        match decode(specs, data) {
            Ok((format, tensors)) => {
                let mut batch = None;
                for (name, tensor) in &tensors {
                    // Each tensor is one of the model's inputs, of its datatype, and its
                    // elements fill its shape.
                    let spec = specs.iter().find(|s| &s.name == name).expect("an input");
                    assert_eq!(tensor.datum_type(), spec.datatype.datum(), "{name}");
                    assert_eq!(tensor.len(), tensor.shape().iter().product::<usize>());
                    // Rows stack instances along a first dimension every input shares.
                    if format == Format::Rows {
                        let rows = tensor.shape().first().copied();
                        assert!(rows.is_some_and(|n| n > 0), "{name}");
                        assert_eq!(*batch.get_or_insert(rows), rows, "{name}");
                    }
                }
            }
            // Whatever is wrong with a request, it is the request's fault.
            Err(e) => assert_eq!(e.into_response().status(), 400),
        }
    }
});
