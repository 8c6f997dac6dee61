//! Triton's dynamic batcher: calls that arrive together run as one batch of the model, each
//! answered as if it ran alone; statistics count the runs and the batch elements as Triton
//! does; a caller that leaves the queue is not run for and holds up nobody.

#[expect(
    dead_code,
    reason = "the helpers of the protocols' tests this binary does not call"
)]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{listen, made_models};
use kep_model_server::batching::{Batcher, Batching, DynamicBatching};
use kep_model_server::model::Input;
use kep_model_server::stats::Statistics;
use kep_model_server::{Engine, Model, Protocol, Served};
use serde_json::{Value, json};
use tract_onnx::prelude::{Tensor, tract_ndarray};

/// `rows` rows of the MLP's input (x FP32 [batch, 4]), different for each `seed`.
fn rows(seed: usize, rows: usize) -> Vec<f32> {
    (0..rows * 4)
        .map(|i| ((seed * 31 + i * 7) % 17) as f32 / 4.0 - 2.0)
        .collect()
}

fn tensor(values: &[f32]) -> Tensor {
    tract_ndarray::Array2::from_shape_vec((values.len() / 4, 4), values.to_vec())
        .unwrap()
        .into()
}

fn batching(max_batch_size: usize, delay: Duration, preferred: &[usize]) -> Batching {
    Batching {
        max_batch_size,
        dynamic: Some(DynamicBatching {
            max_queue_delay: delay,
            preferred_batch_sizes: preferred.to_vec(),
        }),
    }
}

/// 64 callers at once, batches of 1 to 4 rows, through KServe's REST API: each gets what
/// the model gives its rows alone; the statistics show fewer runs than calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_arrive_together_run_as_one_batch_each_answered_as_alone() {
    let made = made_models();
    let path = made.path().join("mlp.onnx");
    let alone = Model::load(&path, Engine::Tract).unwrap();
    let mut served = Served::of_file("mlp", Model::load(&path, Engine::Tract).unwrap());
    served.model_instances = 2;
    served
        .batch(batching(16, Duration::from_millis(20), &[]))
        .unwrap();
    let url = listen(Protocol::Kserve, served).await;
    let client = reqwest::Client::new();
    let infer = |values: Vec<f32>| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let body = json!({"inputs": [{"name": "x", "datatype": "FP32",
                "shape": [values.len() / 4, 4], "data": values}]});
            let answer = (client
                .post(format!("{url}/v2/models/mlp/infer"))
                .json(&body))
            .send()
            .await
            .unwrap();
            (
                answer.status().as_u16(),
                answer.json::<Value>().await.unwrap(),
            )
        }
    };
    let get = async |url: &str| -> Value {
        let answer = client.get(url).send().await.unwrap();
        answer.json().await.unwrap()
    };
    let calls: Vec<Vec<f32>> = (0..64).map(|i| rows(i, i % 4 + 1)).collect();
    let answers = futures_util::future::join_all(calls.iter().cloned().map(infer)).await;
    for (values, (status, got)) in calls.iter().zip(&answers) {
        assert_eq!(*status, 200, "{got}");
        let want = alone
            .run(vec![("x".into(), Input::from(tensor(values)))])
            .unwrap();
        let want: Vec<f32> = want[0]
            .to_plain_array_view::<f32>()
            .unwrap()
            .iter()
            .copied()
            .collect();
        let output = &got["outputs"][0];
        assert_eq!(output["shape"], json!([values.len() / 4, 3]), "{got}");
        let data: Vec<f32> = (output["data"].as_array().unwrap().iter())
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(data.len(), want.len());
        for (g, w) in data.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-6, "{data:?} against {want:?}");
        }
    }
    let stats = get(&format!("{url}/v2/models/mlp/stats")).await;
    let stats = &stats["model_stats"][0];
    let elements: usize = calls.iter().map(|c| c.len() / 4).sum();
    assert_eq!(stats["inference_count"], elements, "{stats}");
    let runs = stats["execution_count"].as_u64().unwrap();
    assert!((1..64).contains(&runs), "calls were batched: {stats}");

    // The configuration in Triton's names; a call past max_batch_size in Triton's words.
    let config = get(&format!("{url}/v2/models/mlp/config")).await;
    assert_eq!(config["max_batch_size"], 16);
    assert_eq!(config["input"][0]["dims"], json!([4]));
    assert_eq!(config["output"][0]["dims"], json!([3]));
    assert_eq!(
        config["dynamic_batching"]["max_queue_delay_microseconds"],
        20_000
    );
    assert_eq!(config["instance_group"][0]["count"], 2);
    let (status, got) = infer(rows(0, 17)).await;
    assert_eq!(status, 400);
    assert_eq!(
        got["error"],
        "inference request batch-size must be <= 16 for 'mlp'"
    );
    let (status, _) = infer(rows(0, 16)).await;
    assert_eq!(status, 200);
}

/// A caller that leaves while its call waits for others (its connection or deadline ended)
/// is left out: its batch is not run, and the call behind it does not wait on its delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_leaves_the_queue_is_not_run_for_and_holds_up_nobody() {
    let made = made_models();
    let model = Arc::new(Model::load(&made.path().join("mlp.onnx"), Engine::Tract).unwrap());
    let stats = Arc::new(Statistics::default());
    // A minute's delay: only a batch of the preferred 2 rows runs before that.
    let minute = batching(8, Duration::from_secs(60), &[2]);
    let batcher = Arc::new(Batcher::start(
        Arc::clone(&model),
        minute,
        1,
        Arc::clone(&stats),
    ));
    let call = |seed: usize, n: usize| {
        let batcher = Arc::clone(&batcher);
        tokio::spawn(async move {
            let x = Input::from(tensor(&rows(seed, n)));
            batcher.run(vec![("x".into(), x)]).await
        })
    };
    // One row waits for more, then two join it: 3 rows, which wait out the minute.
    let one = call(1, 1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let two = call(2, 2);
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The one row's caller gives up: the two left are the preferred size and run now.
    one.abort();
    let ran = tokio::time::timeout(Duration::from_secs(30), two)
        .await
        .expect("the call behind the one that left runs without waiting out its delay")
        .unwrap()
        .unwrap();
    assert_eq!(ran.outputs.unwrap()[0].shape(), [2, 3]);
    assert_eq!(ran.elements, 2);
    assert_eq!(
        stats.snapshot().execution_count,
        1,
        "the row left behind never ran"
    );
}

/// A model whose first dimension is not a batch dimension cannot be batched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_model_with_a_batch_dimension_is_batched() {
    let dir = tempfile::tempdir().unwrap();
    let fixed = dir.path().join("fixed.onnx");
    let make = "import sys, onnx\nfrom onnx import TensorProto as T, helper as h\n\
        g = h.make_graph([h.make_node('Relu', ['x'], ['y'])], 'fixed',\n\
        \x20   [h.make_tensor_value_info('x', T.FLOAT, [2, 4])], [h.make_tensor_value_info('y', T.FLOAT, [2, 4])])\n\
        onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), sys.argv[1])";
    common::python(&["-c", make, fixed.to_str().unwrap()]);
    let mut served = Served::of_file("fixed", Model::load(&fixed, Engine::Tract).unwrap());
    let err = served
        .batch(batching(8, Duration::ZERO, &[]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("needs a batch dimension"), "{err}");
}

/// The same as tritonclient's users call it, over REST, gRPC, a gRPC stream and system shared
/// memory, many at once (`tests/check_batching.py`): each answer ONNX Runtime's for its rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tritonclient_gets_onnx_runtimes_answers_from_a_batching_server() {
    let made = made_models();
    let path = made.path().join("mlp.onnx");
    let mut served = Served::of_file("mlp", Model::load(&path, Engine::Tract).unwrap());
    served.shared_memory = kep_model_server::shm::SharedMemory::new(true);
    served
        .batch(batching(16, Duration::from_millis(5), &[]))
        .unwrap();
    let url = listen(Protocol::Kserve, served).await;
    let script = common::tests_dir().join("check_batching.py");
    let args = [
        script.to_string_lossy().into_owned(),
        url.trim_start_matches("http://").to_owned(),
        "mlp".to_owned(),
        path.to_string_lossy().into_owned(),
        "32".to_owned(),
    ];
    let said = tokio::task::spawn_blocking(move || {
        common::python(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    assert!(
        said.contains("batched answers match ONNX Runtime's"),
        "{said}"
    );
    let runs: Vec<u64> = (said.split_whitespace())
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(runs[1] < 4 * 32, "fewer runs than calls: {said}");
}
