//! A `triton` deployment's `model_config` (CONTRACT §3 "Batching and model instances"):
//! calls that arrive together through the gateway run as one batch, each answered as
//! alone; Triton's configuration and statistics show it; what cannot hold is refused.

use std::process::Command;

use serde_json::{Value, json};

use super::models::{made_models, run, upload_model};
use crate::common::{Server, StopsGracefully, cli, cli_fails, http, port0, serve, wait_available};

/// A `triton` endpoint `name` with one deployment of `model` made with `extra` flags; its
/// URL and key.
fn deployed(srv: &Server, name: &str, model: &str, extra: &[&str]) -> (String, String) {
    let e = cli(srv, &["serving", "endpoint", "create", name]);
    let mut args = vec![
        "serving",
        "deployment",
        "create",
        name,
        "d1",
        "--type",
        "triton",
        "--model",
        model,
    ];
    args.extend(extra);
    cli(srv, &args);
    wait_available(srv, name, "d1");
    let field = |f: &str| e[f].as_str().unwrap().to_owned();
    (field("url"), field("api_key"))
}

/// `n` rows of the MLP's input (x FP32 [n, 4]), different for each `seed`.
fn rows(seed: usize, n: usize) -> Vec<f32> {
    (0..n * 4)
        .map(|i| ((seed * 31 + i * 7) % 17) as f32 / 4.0 - 2.0)
        .collect()
}

fn infer(url: &str, key: &str, values: &[f32]) -> (u16, Value) {
    let body = json!({"inputs": [{"name": "x", "datatype": "FP32",
        "shape": [values.len() / 4, 4], "data": values}]});
    http(
        "POST",
        &format!("{url}/v2/models/mlp/infer"),
        Some(key),
        Some(&body.to_string()),
    )
}

fn floats(v: &Value) -> Vec<f64> {
    v["outputs"][0]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[test]
fn a_triton_deployment_batches_calls_as_its_model_config_says() {
    let dir = tempfile::tempdir().unwrap();
    let models = made_models();
    let srv = StopsGracefully(serve(dir.path(), &port0(), &[]));
    let srv = &srv.0;
    upload_model(srv, "mlp", models.path().join("mlp.onnx"), "pytorch");
    // A model whose first dimension is fixed: it cannot take batches.
    let fixed = models.path().join("fixed.onnx");
    let make = "import sys, onnx\nfrom onnx import TensorProto as T, helper as h\n\
        g = h.make_graph([h.make_node('Relu', ['x'], ['y'])], 'fixed',\n\
        \x20   [h.make_tensor_value_info('x', T.FLOAT, [2, 4])], [h.make_tensor_value_info('y', T.FLOAT, [2, 4])])\n\
        onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), sys.argv[1])";
    run(Command::new("python3").args(["-c", make, fixed.to_str().unwrap()]));
    upload_model(srv, "fixed", &fixed, "pytorch");

    // What cannot hold is a 400 on model_config, and nothing is made.
    cli(srv, &["serving", "endpoint", "create", "bad"]);
    for (kind, model, config, said) in [
        (
            "triton",
            "mlp",
            r#"{"max_batch_size": 4097}"#,
            "at most 4096",
        ),
        (
            "triton",
            "mlp",
            r#"{"instance_group_count": 0}"#,
            "from 1 to 16",
        ),
        (
            "triton",
            "mlp",
            r#"{"instance_group_count": 17}"#,
            "from 1 to 16",
        ),
        (
            "triton",
            "mlp",
            r#"{"dynamic_batching": {}}"#,
            "needs a max_batch_size",
        ),
        (
            "triton",
            "mlp",
            r#"{"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_us": 10000001}}"#,
            "at most 10000000",
        ),
        (
            "triton",
            "mlp",
            r#"{"max_batch_size": 8, "dynamic_batching": {"preferred_batch_sizes": [4, 9]}}"#,
            "9 is not from 1 to max_batch_size (8)",
        ),
        (
            "triton",
            "fixed",
            r#"{"max_batch_size": 2}"#,
            "needs a batch dimension",
        ),
        (
            "tensorflow-serving",
            "mlp",
            r#"{"max_batch_size": 8}"#,
            "only triton batches",
        ),
    ] {
        let err = cli_fails(
            srv,
            &[
                "serving",
                "deployment",
                "create",
                "bad",
                "d1",
                "--type",
                kind,
                "--model",
                model,
                "--model-config",
                config,
            ],
        );
        assert!(
            err.contains("HTTP 400") && err.contains("model_config") && err.contains(said),
            "{config}: {err}"
        );
    }
    let none = cli(srv, &["serving", "deployment", "list", "bad"]);
    assert_eq!(none.as_array().map(Vec::len), Some(0), "{none}");

    let config = r#"{"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_us": 20000, "preferred_batch_sizes": [4, 8]}, "instance_group_count": 2}"#;
    let (url, key) = deployed(srv, "batched", "mlp", &["--model-config", config]);
    let (plain_url, plain_key) = deployed(srv, "plain", "mlp", &[]);
    let shown = cli(srv, &["serving", "deployment", "show", "batched", "d1"]);
    assert_eq!(
        shown["model_config"],
        serde_json::from_str::<Value>(config).unwrap()
    );

    // 32 callers at once, 1 to 4 rows each: each gets what the model gives its rows alone.
    let calls: Vec<Vec<f32>> = (0..32).map(|i| rows(i, i % 4 + 1)).collect();
    let answers: Vec<(u16, Value)> = std::thread::scope(|s| {
        let threads: Vec<_> = (calls.iter())
            .map(|c| s.spawn(|| infer(&url, &key, c)))
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for (values, (status, got)) in calls.iter().zip(&answers) {
        assert_eq!(*status, 200, "{got}");
        let (_, alone) = infer(&plain_url, &plain_key, values);
        let (got, alone) = (floats(got), floats(&alone));
        assert_eq!(got.len(), alone.len());
        assert!(
            got.iter().zip(&alone).all(|(g, a)| (g - a).abs() <= 1e-6),
            "{got:?} against {alone:?}"
        );
    }
    let (_, stats) = http(
        "GET",
        &format!("{url}/v2/models/mlp/stats"),
        Some(&key),
        None,
    );
    let stats = &stats["model_stats"][0];
    let elements: usize = calls.iter().map(|c| c.len() / 4).sum();
    assert_eq!(stats["inference_count"], elements, "{stats}");
    let runs = stats["execution_count"].as_u64().unwrap();
    assert!((1..32).contains(&runs), "the calls were batched: {stats}");

    // Triton's configuration; past max_batch_size, Triton's words.
    let (_, shown) = http(
        "GET",
        &format!("{url}/v2/models/mlp/config"),
        Some(&key),
        None,
    );
    assert_eq!(shown["max_batch_size"], 8, "{shown}");
    assert_eq!(shown["input"][0]["dims"], json!([4]));
    let dynamic = &shown["dynamic_batching"];
    assert_eq!(dynamic["max_queue_delay_microseconds"], 20_000, "{shown}");
    assert_eq!(dynamic["preferred_batch_size"], json!([4, 8]));
    assert_eq!(shown["instance_group"][0]["count"], 2);
    let (status, err) = infer(&url, &key, &rows(0, 9));
    assert_eq!(status, 400);
    assert_eq!(
        err["error"],
        "inference request batch-size must be <= 8 for 'mlp'"
    );

    // Cleared, the deployment serves unbatched again.
    cli(
        srv,
        &[
            "serving",
            "deployment",
            "patch",
            "batched",
            "d1",
            "--clear-model-config",
        ],
    );
    wait_available(srv, "batched", "d1");
    let shown = cli(srv, &["serving", "deployment", "show", "batched", "d1"]);
    assert!(shown.get("model_config").is_none(), "{shown}");
}
