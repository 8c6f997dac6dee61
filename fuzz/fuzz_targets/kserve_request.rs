//! `POST /v2/models/{m}/infer` requests, read by `kep_model_server::kserve::decode`, which
//! the handler calls before the model runs. The input's first line is the
//! `Inference-Header-Content-Length` (binary tensor data extension), left out when empty;
//! the rest is the body. The model has an input and an output of every datatype.
#![no_main]

use std::sync::LazyLock;

use axum::http::HeaderValue;
use axum::response::IntoResponse as _;
use axum::body::Bytes;
use kep_fuzz::{filled_shape, models, split_line};
use kep_model_server::kserve::decode;
use kep_model_server::shm::SharedMemory;
use kep_model_server::TensorSpec;
use libfuzzer_sys::fuzz_target;

static OUTPUTS: LazyLock<Vec<TensorSpec>> = LazyLock::new(models::every_datatype);
static SHM: LazyLock<SharedMemory> = LazyLock::new(|| SharedMemory::new(false));

fuzz_target!(|data: &[u8]| {
    let (line, body) = split_line(data);
    let length = match line {
        [] => None,
        line => match HeaderValue::from_bytes(line) {
            Ok(v) => Some(v),
            // Not a header value: no client could send it.
            Err(_) => return,
        },
    };
    match decode("every_datatype", &OUTPUTS, &SHM, length.as_ref(), &Bytes::copy_from_slice(body)) {
        Ok(request) => {
            // Each tensor's elements fill its shape; each output asked for is the model's.
            for (name, input) in request.inputs {
                filled_shape(&name, input);
            }
            assert!(request.wanted.iter().all(|w| w.output < OUTPUTS.len()));
        }
        // 404: a shared memory region that is not registered.
        Err(e) => assert!(matches!(e.into_response().status().as_u16(), 400 | 404)),
    }
});
