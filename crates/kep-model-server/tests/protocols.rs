//! The model server as its users call it: a real server on port 0 per model, driven by the
//! real `tritonclient` (KServe v2) and by plain HTTP (TF Serving REST), answers compared
//! with ONNX Runtime's (`tests/check.py`). Models are made with the `onnx` package
//! (`tests/make_models.py`) or ship inside the `onnx` and `onnxruntime` wheels.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{ENGINES, listen, made_models, python, serve, tests_dir};
use kep_model_server::shm::SharedMemory;
use kep_model_server::{Engine, Model, ModelError, Protocol, Served, router};
use serde_json::{Value, json};

/// A model file shipped inside a Python package (`onnx`, `onnxruntime`).
fn wheel_model(package: &str, relative: &str) -> PathBuf {
    let code = format!("import {package}, os; print(os.path.dirname({package}.__file__))");
    Path::new(python(&["-c", &code]).trim()).join(relative)
}

/// Runs `tests/{script}` with `args`, blocking beside the server's runtime; what it printed.
async fn script(script: &str, args: &[&str]) -> String {
    let mut argv = vec![tests_dir().join(script).to_string_lossy().into_owned()];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    tokio::task::spawn_blocking(move || {
        python(&argv.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap()
}

async fn check(protocol: &str, url: &str, name: &str, path: &Path) {
    let said = script("check.py", &[protocol, url, name, &path.to_string_lossy()]).await;
    assert!(said.contains("answers match ONNX Runtime's"), "{said}");
}

/// Over REST (`tritonclient.http`: binary tensors and JSON) and over Triton's gRPC API on
/// the same port (`tritonclient.grpc`, HTTP/2 beside HTTP/1.1: every RPC, statistics,
/// configuration, the repository calls and Triton's error texts; REST still answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kserve_answers_tritonclient_as_onnx_runtime_does() {
    let made = made_models();
    for (name, path) in [
        ("mlp", made.path().join("mlp.onnx")),
        // Every datatype, FP16 and BYTES included, as binary tensors and as JSON.
        ("identity", made.path().join("identity.onnx")),
        (
            "squeezenet",
            wheel_model("onnx", "backend/test/data/light/light_squeezenet.onnx"),
        ),
        (
            "sigmoid",
            wheel_model("onnxruntime", "datasets/sigmoid.onnx"),
        ),
    ] {
        for &engine in ENGINES {
            let url = serve(Protocol::Kserve, engine, name, &path).await;
            for client in ["kserve", "kserve-grpc"] {
                check(client, &url, name, &path).await;
            }
        }
    }
}

/// With four model instances a stream has up to four requests at work at once (tract runs
/// them on one plan) and still answers in the order they were sent (`check.py`'s stream).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_with_several_instances_answers_in_order() {
    let made = made_models();
    let path = made.path().join("mlp.onnx");
    let mut served = Served::of_file("mlp", Model::load(&path, Engine::Tract).unwrap());
    served.model_instances = 4;
    let url = listen(Protocol::Kserve, served).await;
    check("kserve-grpc", &url, "mlp", &path).await;
}

/// Triton's extensions (configuration, statistics, repository, classification, logging,
/// trace) as `tritonclient` calls them (`tests/check_triton.py`); the logging and trace
/// settings over REST and gRPC, one set of them (`tests/check_settings.py`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triton_extensions_answer_tritonclient_as_triton_does() {
    let made = made_models();
    let path = made.path().join("mlp.onnx");
    let url = serve(Protocol::Kserve, Engine::Tract, "mlp", &path).await;
    let said = script(
        "check_triton.py",
        &[
            url.trim_start_matches("http://"),
            "mlp",
            &path.to_string_lossy(),
        ],
    )
    .await;
    assert!(said.contains("as Triton answers them"), "{said}");
    let at = url.trim_start_matches("http://");
    let said = script("check_settings.py", &[at, at, "mlp"]).await;
    assert!(said.contains("as Triton answers them"), "{said}");
}

/// Triton's system shared memory extension as `tritonclient` uses it, over REST and gRPC, in
/// each engine (`tests/check_shm.py`): regions registered, read and written at offsets,
/// Triton's texts at and past every limit; and refused, in Triton's words, unless allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_shared_memory_carries_tensors_as_triton_s_does() {
    let made = made_models();
    let path = made.path().join("mlp.onnx");
    for &engine in ENGINES {
        let mut served = Served::of_file("mlp", Model::load(&path, engine).unwrap());
        served.shared_memory = SharedMemory::new(true);
        let url = listen(Protocol::Kserve, served).await;
        for client in ["http", "grpc"] {
            let said = script(
                "check_shm.py",
                &[
                    client,
                    url.trim_start_matches("http://"),
                    "mlp",
                    &path.to_string_lossy(),
                ],
            )
            .await;
            assert!(said.contains("as Triton answers it"), "{said}");
        }
    }

    let url = serve(Protocol::Kserve, Engine::Tract, "mlp", &path).await;
    let http = reqwest::Client::new();
    let register = format!("{url}/v2/systemsharedmemory/region/r/register");
    let res = http
        .post(register)
        .body(r#"{"key": "/k", "byte_size": 4}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 501);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body, json!({ "error": kep_model_server::shm::DISABLED }));
    let status = http
        .get(format!("{url}/v2/systemsharedmemory/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(status.json::<Value>().await.unwrap(), json!([]));
    // CUDA shared memory over REST says first that client shared memory is disabled.
    for path in ["register", "region/c/register", "unregister"] {
        let (code, body) = send(&http, format!("{url}/v2/cudasharedmemory/{path}"), "{}").await;
        assert_eq!(
            (code, body),
            (501, json!({ "error": kep_model_server::shm::DISABLED }))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tf_serving_rows_and_columns_answer_as_onnx_runtime_does() {
    let made = made_models();
    for name in ["mlp", "identity"] {
        let path = made.path().join(format!("{name}.onnx"));
        for &engine in ENGINES {
            let url = serve(Protocol::TfServing, engine, name, &path).await;
            check("tfserving", &url, name, &path).await;
        }
    }
}

async fn send(http: &reqwest::Client, url: String, body: &str) -> (u16, Value) {
    let res = http.post(url).body(body.to_owned()).send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// A TensorFlow frozen GraphDef (`make_models.py` writes the MLP as one, with the same
/// weights) answers both protocols as ONNX Runtime answers the ONNX MLP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tensorflow_frozen_graph_answers_as_its_onnx_twin_does() {
    let made = made_models();
    let frozen = made.path().join("mlp.pb");
    let ((inputs, outputs), format) = kep_model_server::model::inspect(&frozen).unwrap();
    assert_eq!(format, kep_model_server::model::Format::FrozenGraph);
    assert_eq!(
        serde_json::to_value((&inputs, &outputs)).unwrap(),
        json!([[{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
               [{"name": "probs", "datatype": "FP32", "shape": [-1, 3]}]])
    );
    for (protocol, which) in [
        (Protocol::Kserve, "kserve"),
        (Protocol::TfServing, "tfserving"),
    ] {
        let url = serve(protocol, Engine::Tract, "mlp", &frozen).await;
        check(which, &url, "mlp", &made.path().join("mlp.onnx")).await;
    }
}

#[tokio::test]
async fn bad_kserve_requests_get_the_protocols_errors_and_the_server_goes_on() {
    let made = made_models();
    for &engine in ENGINES {
        let url = serve(
            Protocol::Kserve,
            engine,
            "mlp",
            &made.path().join("mlp.onnx"),
        )
        .await;
        bad_kserve_requests(&url).await;
    }
}

async fn bad_kserve_requests(url: &str) {
    let http = reqwest::Client::new();
    let infer = format!("{url}/v2/models/mlp/infer");
    let good = json!({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                                  "data": [1, 2, 3, 4]}]});
    let with = |input: Value| json!({"inputs": [input]}).to_string();
    let cases = [
        (
            with(
                json!({"name": "x", "shape": [1, 5], "datatype": "FP32", "data": [1, 2, 3, 4, 5]}),
            ),
            400,
            "unexpected shape for input 'x' for model 'mlp'. Expected [-1,4], got [1,5]",
        ),
        (
            with(json!({"name": "x", "shape": [1, 4], "datatype": "FP64", "data": [1, 2, 3, 4]})),
            400,
            "inference input 'x' data-type is 'FP64', but model 'mlp' expects 'FP32'",
        ),
        (
            with(json!({"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3]})),
            400,
            "3 values",
        ),
        (
            with(json!({"name": "x", "shape": [1, 4], "datatype": "INT128", "data": [1, 2, 3, 4]})),
            400,
            "unknown datatype",
        ),
        (
            with(json!({"name": "y", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]})),
            400,
            "unexpected inference input 'y' for model 'mlp'",
        ),
        (
            json!({"inputs": []}).to_string(),
            400,
            "expected 1 inputs but got 0 inputs for model 'mlp'. Got input(s) [], but missing required input(s) ['x']. Please provide all required input(s).",
        ),
        ("{\"inputs\": [".to_owned(), 400, "not an inference request"),
        (
            json!({"inputs": good["inputs"], "outputs": [{"name": "logits"}]}).to_string(),
            400,
            "unexpected inference output 'logits' for model 'mlp'",
        ),
    ];
    for (body, status, said) in cases {
        let (got, v) = send(&http, infer.clone(), &body).await;
        assert_eq!(got, status, "{body}: {v}");
        let error = v["error"].as_str().unwrap_or_default();
        assert!(error.contains(said), "{body}: {v}");
    }
    for (path, said) in [
        (
            "/v2/models/other/infer",
            "Request for unknown model: 'other' is not found",
        ),
        (
            "/v2/models/mlp/versions/2/infer",
            "Request for unknown model: 'mlp' version 2 is not found",
        ),
        ("/v2/nothing/here", "Not Found"),
    ] {
        let (got, v) = send(&http, format!("{url}{path}"), &good.to_string()).await;
        assert_eq!((got, v["error"].as_str()), (404, Some(said)), "{path}");
    }
    // A served path with another method: Triton's 405, in the same shape.
    let res = http.get(&infer).send().await.unwrap();
    assert_eq!(res.status(), 405);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["error"], "Method Not Allowed");
    // A declared binary header longer than the body.
    let res = http
        .post(&infer)
        .header("Inference-Header-Content-Length", "9999")
        .body(good.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    // Still serving, flat or nested data alike.
    let (got, v) = send(&http, infer.clone(), &good.to_string()).await;
    assert_eq!(got, 200, "{v}");
    let nested = with(json!({"name": "x", "shape": [1, 4], "datatype": "FP32",
                             "data": [[1, 2, 3, 4]]}));
    let (_, w) = send(&http, infer, &nested).await;
    assert_eq!(v["outputs"], w["outputs"]);
    assert_eq!(v["outputs"][0]["shape"], json!([1, 3]));
}

#[tokio::test]
async fn bad_tf_serving_requests_get_the_protocols_errors() {
    let made = made_models();
    for &engine in ENGINES {
        let url = serve(
            Protocol::TfServing,
            engine,
            "mlp",
            &made.path().join("mlp.onnx"),
        )
        .await;
        bad_tf_serving_requests(&url).await;
    }
}

async fn bad_tf_serving_requests(url: &str) {
    let http = reqwest::Client::new();
    let predict = format!("{url}/v1/models/mlp:predict");
    for (body, said) in [
        // NaN is no JSON number.
        ("{\"instances\": [[NaN, 1, 2, 3]]}", ""),
        ("{\"instances\": [[1, 2, 3]]}", "shape"),
        ("{\"instances\": [[1, 2, 3, 4], [1, 2]]}", ""),
        ("{\"inputs\": [[\"a\", 2, 3, 4]]}", ""),
        (
            "{\"instances\": [[1, 2, 3, 4]], \"inputs\": [[1, 2, 3, 4]]}",
            "",
        ),
        ("{}", ""),
        ("not json", ""),
    ] {
        let (got, v) = send(&http, predict.clone(), body).await;
        assert_eq!(got, 400, "{body}: {v}");
        assert!(v["error"].as_str().unwrap().contains(said), "{body}: {v}");
    }
    let (got, _) = send(&http, format!("{url}/v1/models/other:predict"), "{}").await;
    assert_eq!(got, 404);
    let status = http
        .get(format!("{url}/v1/models/mlp"))
        .send()
        .await
        .unwrap();
    let status: Value = status.json().await.unwrap();
    assert_eq!(status["model_version_status"][0]["state"], "AVAILABLE");
    let (got, v) = send(
        &http,
        predict,
        "{\"instances\": [[1, 2, 3, 4], [4, 3, 2, 1]]}",
    )
    .await;
    assert_eq!(got, 200, "{v}");
    assert_eq!(v["predictions"].as_array().unwrap().len(), 2);
}

/// A batch dimension with no name (`None` in `onnx.helper`) or written as `-1` is a
/// variable one: the model loads in every engine, says `-1`, and takes any batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unnamed_or_minus_one_batch_dimension_is_variable() {
    let made = made_models();
    for name in ["unnamed_batch", "minus_one_batch"] {
        let path = made.path().join(format!("{name}.onnx"));
        let ((inputs, outputs), _) = kep_model_server::model::inspect(&path).unwrap();
        assert_eq!(
            (&inputs[0].shape, &outputs[0].shape),
            (&vec![-1, 4], &vec![-1, 4])
        );
        for &engine in ENGINES {
            let url = serve(Protocol::Kserve, engine, name, &path).await;
            check("kserve", &url, name, &path).await;
        }
    }
}

#[test]
fn a_model_the_engine_cannot_run_is_refused_at_load() {
    let made = made_models();
    for &engine in ENGINES {
        let err = match Model::load(&made.path().join("unsupported.onnx"), engine) {
            Err(e) => e,
            Ok(_) => panic!("an unknown operator loaded in {engine:?}"),
        };
        assert!(
            matches!(err, ModelError::Unsupported(_) | ModelError::Unreadable(_)),
            "{err:?}"
        );
        assert!(err.to_string().contains("Frobnicate"), "{engine:?}: {err}");
    }
    let not_a_model = made.path().join("mlp.txt");
    std::fs::write(&not_a_model, "hello").unwrap();
    assert!(matches!(
        kep_model_server::model::inspect(&not_a_model),
        Err(ModelError::Unreadable(_))
    ));
}

#[tokio::test]
async fn a_cosmos_script_runs_around_the_model() {
    use kep_model_server::cosmos::Script;
    let made = made_models();
    let source = std::fs::read_to_string(tests_dir().join("serve.rhai")).unwrap();
    let served = Arc::new(Served::of_file(
        "mlp",
        Model::load(&made.path().join("mlp.onnx"), Engine::Tract).unwrap(),
    ));
    let script = Arc::new(Script::compile(&source).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = router(Protocol::Cosmos, served, Some(script));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let http = reqwest::Client::new();
    let predict = format!("{url}/predict");

    let body = json!({"features": [[1, 2, 3, 4], [0.5, 0.1, -1, 2]], "names": ["a", "b", "c"]});
    let (status, v) = send(&http, predict.clone(), &body.to_string()).await;
    assert_eq!(status, 200, "{v}");
    let probs = v["probs"].as_array().unwrap();
    assert_eq!(probs.len(), 2);
    for (row, label) in probs.iter().zip(v["labels"].as_array().unwrap()) {
        let row: Vec<f64> = row
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-5);
        let best = (0..3).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap();
        assert_eq!(label, ["a", "b", "c"][best]);
    }
    // The script's own error, and the model's, reach the caller as 400s.
    let (status, v) = send(&http, predict.clone(), "{\"names\": []}").await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("the request has no features"),
        "{v}"
    );
    let (status, v) = send(&http, predict.clone(), "{\"features\": [[1, 2]]}").await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("shape"), "{v}");
    let (status, _) = send(&http, predict.clone(), "not json").await;
    assert_eq!(status, 400);
    let res = http.get(format!("{url}/health")).send().await.unwrap();
    assert_eq!(res.status(), 200);

    // A script without its two functions, or that does not parse, is refused at load.
    let missing = Script::compile("fn preprocess(r) { r }").err().unwrap();
    assert!(missing.contains("postprocess"), "{missing}");
    assert!(Script::compile("fn (").is_err());
    // A runaway script is stopped by the operations limit, not left spinning.
    let spin = Script::compile("fn preprocess(r) { loop {} } fn postprocess(o, r) { o }").unwrap();
    let served = Arc::new(Served::of_file(
        "mlp",
        Model::load(&made.path().join("mlp.onnx"), Engine::Tract).unwrap(),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = router(Protocol::Cosmos, served, Some(Arc::new(spin)));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (status, v) = send(&http, format!("{url}/predict"), "{}").await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("operations"), "{v}");
}

/// ONNX Runtime runs what tract cannot (here `Det`); the model's signature is still read at
/// upload, and tract refuses it at load with the reason.
#[cfg(feature = "onnxruntime")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn onnx_runtime_serves_a_model_tract_cannot_run() {
    let made = made_models();
    let path = made.path().join("ort_only.onnx");
    let err = Model::load(&path, Engine::Tract)
        .err()
        .expect("tract lacks Det");
    assert!(err.to_string().contains("Det"), "{err}");
    let ((inputs, outputs), _) = kep_model_server::model::inspect(&path).unwrap();
    assert_eq!(
        (inputs[0].shape.clone(), outputs[0].name.as_str()),
        (vec![-1, 3, 3], "y")
    );
    let url = serve(Protocol::Kserve, Engine::OnnxRuntime, "det", &path).await;
    check("kserve", &url, "det", &path).await;
}
