//! `ModelInfer` requests over gRPC: the protobuf message as it arrives, decoded by prost and
//! read by `kep_model_server::kserve::grpc::read_inputs`, which the handler calls before the
//! model runs (raw contents in the binary tensor format, or the typed `contents`).
#![no_main]

use axum::response::IntoResponse as _;
use kep_model_server::kserve::grpc::inference::ModelInferRequest;
use kep_model_server::kserve::grpc::read_inputs;
use kep_fuzz::filled_shape;
use kep_model_server::shm::SharedMemory;
use libfuzzer_sys::fuzz_target;
use prost::Message as _;

fuzz_target!(|data: &[u8]| {
    // Bytes that are no message are refused by the gRPC layer before this.
    let Ok(request) = ModelInferRequest::decode(data) else {
        return;
    };
    let shm = SharedMemory::new(false);
    match read_inputs("m", &request.inputs, request.raw_input_contents, &shm) {
        Ok(tensors) => {
            // One tensor per input, each filling the shape the request declared.
            assert_eq!(tensors.len(), request.inputs.len());
            for ((name, tensor), input) in tensors.into_iter().zip(&request.inputs) {
                assert_eq!(name, input.name);
                let declared: Vec<usize> = input.shape.iter().map(|&d| d as usize).collect();
                assert_eq!(filled_shape(&name, tensor), declared, "{name}");
            }
        }
        // 404: a shared memory region that is not registered.
        Err(e) => assert!(matches!(e.into_response().status().as_u16(), 400 | 404)),
    }
});
