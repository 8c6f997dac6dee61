//! Several sessions of one model in ONNX Runtime (Triton's model instances): calls from many
//! threads at once each get an idle session and the answer a lone call gets. A test binary
//! of its own: the number of sessions is fixed for the process by its first model.
#![cfg(feature = "onnxruntime")]

#[expect(
    dead_code,
    reason = "this binary makes the models only; it serves none"
)]
mod common;

use common::made_models;
use kep_model_server::model::Input;
use kep_model_server::{Engine, Model};
use tract_onnx::prelude::{Tensor, tract_ndarray};

fn rows(seed: usize) -> Tensor {
    let values: Vec<f32> = (0..8)
        .map(|i| ((seed * 8 + i) % 13) as f32 / 3.0 - 2.0)
        .collect();
    tract_ndarray::Array2::from_shape_vec((2, 4), values)
        .unwrap()
        .into()
}

#[test]
fn calls_at_once_share_the_sessions_and_get_a_lone_call_s_answer() {
    kep_model_server::onnxruntime::use_sessions(3);
    let made = made_models();
    let model = Model::load(&made.path().join("mlp.onnx"), Engine::OnnxRuntime).unwrap();
    let run = |seed: usize| {
        let mut out = model
            .run(vec![("x".to_owned(), Input::from(rows(seed)))])
            .unwrap();
        out.remove(0)
    };
    let alone: Vec<Tensor> = (0..16).map(run).collect();
    // Eight threads on three sessions: some wait for one to come back.
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (run, alone) = (&run, &alone);
                s.spawn(move || {
                    for round in 0..25 {
                        let seed = (t * 25 + round) % 16;
                        assert_eq!(run(seed), alone[seed], "thread {t}, round {round}");
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
    });
}
