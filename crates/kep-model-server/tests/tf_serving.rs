//! The TensorFlow Serving REST API as a TF Serving user calls it, over plain HTTP: status
//! codes and error texts are TF Serving's own (the source file each comes from, in
//! tensorflow/serving unless said, is named beside it), and `:classify` and `:regress`
//! answer as `:predict` and ONNX Runtime do. Models come from `tests/make_models.py`.

mod common;

use common::{ENGINES, made_models, python, serve, tests_dir};
use kep_model_server::{Engine, Protocol};
use serde_json::{Value, json};

/// A call: its status and its JSON body (`null` when there is none).
async fn call(method: &str, url: &str, body: Option<&str>) -> (u16, Value) {
    let http = reqwest::Client::new();
    let mut req = http.request(method.parse().unwrap(), url);
    if let Some(body) = body {
        req = req.body(body.to_owned());
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// Asserts a call fails with `status` and exactly TF Serving's `error` text.
async fn fails(method: &str, url: &str, body: Option<&str>, status: u16, error: &str) {
    let (got, v) = call(method, url, body).await;
    assert_eq!(
        (got, v["error"].as_str()),
        (status, Some(error)),
        "{method} {url} {body:?}"
    );
}

fn floats(v: &Value) -> Vec<f64> {
    match v {
        Value::Array(items) => items.iter().flat_map(floats).collect(),
        x => vec![x.as_f64().unwrap()],
    }
}

fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-5 + 1e-4 * y.abs())
}

const ROWS: [[f64; 4]; 3] = [
    [1.0, 2.0, 3.0, 4.0],
    [0.5, 0.1, -1.0, 2.0],
    [0.0, 0.0, 0.0, 0.0],
];

/// The rows as `:classify` / `:regress` examples: one float feature `x` each, decimals
/// written as such (an integer is an int64 feature in a `tf.Example`).
fn examples() -> Value {
    let rows: Vec<Value> = ROWS
        .iter()
        .map(|r| json!({"x": r.iter().map(|v| format!("{v:.1}").parse::<serde_json::Number>().unwrap()).collect::<Vec<_>>()}))
        .collect();
    Value::Array(rows)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_metadata_answer_as_tf_serving_does() {
    let made = made_models();
    let url = serve(
        Protocol::TfServing,
        Engine::Tract,
        "mlp",
        &made.path().join("mlp.onnx"),
    )
    .await;
    let available = json!({"model_version_status": [{
        "version": "1", "state": "AVAILABLE",
        "status": {"error_code": "OK", "error_message": ""},
    }]});
    // A label is not read by the status call (model_servers/get_model_status_impl.cc).
    for path in [
        "/v1/models/mlp",
        "/v1/models/mlp/versions/1",
        "/V1/MODELS/mlp/versions/01",
        "/v1/models/mlp/labels/stable",
    ] {
        assert_eq!(
            call("GET", &format!("{url}{path}"), None).await,
            (200, available.clone()),
            "{path}"
        );
    }
    // model_servers/get_model_status_impl.cc; NOT_FOUND is 404 (http_server.cc).
    fails(
        "GET",
        &format!("{url}/v1/models/mlp/versions/2"),
        None,
        404,
        "Could not find version 2 of model mlp",
    )
    .await;
    fails(
        "GET",
        &format!("{url}/v1/models/other"),
        None,
        404,
        "Could not find any versions of model other",
    )
    .await;
    // model_servers/http_rest_api_handler.cc and http_rest_api_util.cc.
    fails(
        "GET",
        &format!("{url}/v1/models"),
        None,
        400,
        "Missing model name in request.",
    )
    .await;
    fails(
        "GET",
        &format!("{url}/v1/models/mlp:predict"),
        None,
        400,
        "Malformed request: GET /v1/models/mlp:predict",
    )
    .await;
    fails(
        "DELETE",
        &format!("{url}/v1/models/mlp"),
        None,
        400,
        "Malformed request: DELETE /v1/models/mlp",
    )
    .await;
    fails(
        "GET",
        &format!("{url}/v1/models/mlp/versions/99999999999999999999"),
        None,
        400,
        "Failed to convert version: 99999999999999999999 to numeric.",
    )
    .await;
    // Outside `/v1/`, TF Serving's HTTP server finds no handler.
    let (status, v) = call("GET", &format!("{url}/v2/models/mlp"), None).await;
    assert_eq!((status, v["error"].is_string()), (404, true));

    let (status, meta) = call(
        "GET",
        &format!("{url}/v1/models/mlp/versions/1/metadata"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{meta}");
    assert_eq!(
        meta["model_spec"],
        json!({"name": "mlp", "signature_name": "", "version": "1"})
    );
    let sig = &meta["metadata"]["signature_def"]["signature_def"]["serving_default"];
    // The MLP's [batch, 3] probabilities are scores: it classifies.
    assert_eq!(sig["method_name"], "tensorflow/serving/classify");
    assert_eq!(sig["inputs"]["x"]["dtype"], "DT_FLOAT");
    assert_eq!(
        sig["outputs"]["probs"]["tensor_shape"]["dim"][1]["size"],
        "3"
    );
    // core/basic_manager.cc (Servable not found), model_servers/server_core.cc (labels).
    fails(
        "GET",
        &format!("{url}/v1/models/mlp/versions/2/metadata"),
        None,
        404,
        "Servable not found for request: Specific(mlp, 2)",
    )
    .await;
    fails(
        "GET",
        &format!("{url}/v1/models/other/metadata"),
        None,
        404,
        "Servable not found for request: Latest(other)",
    )
    .await;
    fails(
        "GET",
        &format!("{url}/v1/models/mlp/labels/stable/metadata"),
        None,
        400,
        "Unrecognized servable version label: stable",
    )
    .await;

    // A CORS preflight needs an http(s) Origin (model_servers/http_server.cc).
    let http = reqwest::Client::new();
    let preflight = http.request(
        reqwest::Method::OPTIONS,
        format!("{url}/v1/models/mlp:predict"),
    );
    let res = preflight
        .try_clone()
        .unwrap()
        .header("Origin", "https://example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let res = preflight.send().await.unwrap();
    assert_eq!(res.status(), 400);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["error"], "Origin header is missing in CORS preflight");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predict_errors_are_tf_servings() {
    let made = made_models();
    for &engine in ENGINES {
        let url = serve(
            Protocol::TfServing,
            engine,
            "mlp",
            &made.path().join("mlp.onnx"),
        )
        .await;
        let predict = format!("{url}/v1/models/mlp:predict");
        let good = r#"{"instances": [[1.0, 2.0, 3.0, 4.0]]}"#;
        // model_servers/http_rest_api_handler.cc (GetInfoMap): one signature.
        fails(
            "POST",
            &predict,
            Some(r#"{"signature_name": "other", "instances": [[1, 2, 3, 4]]}"#),
            400,
            "Serving signature name: \"other\" not found in signature def",
        )
        .await;
        // util/json_tensor.cc: the body's own errors, before the model is looked up.
        for (path, body, error) in [
            (
                "/v1/models/mlp:predict",
                "",
                "JSON Parse error: The document is empty",
            ),
            (
                "/v1/models/other:predict",
                "{\"instances\": [",
                "JSON Parse error: Invalid value. at offset: 15",
            ),
            (
                "/v1/models/mlp:predict",
                "{}",
                "Missing 'inputs' or 'instances' key",
            ),
            (
                "/v1/models/mlp:predict",
                r#"{"inputs": [[1, 2, 3, 4]], "instances": [[1, 2, 3, 4]]}"#,
                "JSON Value: {\n    \"inputs\": [[1, 2, 3, 4]],\n    \"instances\": [[1, 2, 3, 4]]\n} \
                 Not formatted correctly expecting only one of 'inputs' or 'instances' keys to exist ",
            ),
            (
                "/v1/models/mlp:predict",
                r#"{"instances": [[1, 2, 3, 4], [1, 2]]}"#,
                "Failed to process element: 1 of 'instances' list. Error: INVALID_ARGUMENT: \
                 Expecting tensor size: 4 but got: 2",
            ),
            (
                "/v1/models/mlp:predict",
                r#"{"inputs": [["a", 2, 3, 4]]}"#,
                "JSON Value: \"a\" Type: String is not of expected type: float",
            ),
        ] {
            fails("POST", &format!("{url}{path}"), Some(body), 400, error).await;
        }
        // The model, then its version or label (core/basic_manager.cc, model_servers/server_core.cc).
        fails(
            "POST",
            &format!("{url}/v1/models/other:predict"),
            Some(good),
            404,
            "Servable not found for request: Latest(other)",
        )
        .await;
        fails(
            "POST",
            &format!("{url}/v1/models/mlp/versions/2:predict"),
            Some(good),
            404,
            "Servable not found for request: Specific(mlp, 2)",
        )
        .await;
        fails(
            "POST",
            &format!("{url}/v1/models/mlp/labels/canary:predict"),
            Some(good),
            400,
            "Unrecognized servable version label: canary",
        )
        .await;
        // The verb is matched in any case, then compared in lower case.
        fails(
            "POST",
            &format!("{url}/v1/models/mlp:Predict"),
            Some(good),
            400,
            "Malformed request: POST /v1/models/mlp:Predict",
        )
        .await;
        fails(
            "POST",
            &format!("{url}/v1/models/mlp"),
            Some(good),
            400,
            "Malformed request: POST /v1/models/mlp",
        )
        .await;
        // A shape the model does not take is the request's fault, and the server goes on.
        let (status, v) = call("POST", &predict, Some(r#"{"instances": [[1, 2, 3]]}"#)).await;
        assert_eq!((status, v["error"].is_string()), (400, true), "{v}");
        let (status, v) = call(
            "POST",
            &format!("{url}/v1/models/mlp/versions/1:predict"),
            Some(good),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["predictions"].as_array().unwrap().len(), 1);
    }
}

/// `:classify` on the MLP: its probabilities as the scores of unlabelled classes, as TF
/// Serving answers for a signature with scores and no classes; equal to `:predict`'s.
/// A body whose `Content-Encoding` names gzip is inflated (net_http's `auto_uncompress_input`,
/// on by default); one that does not inflate is read as empty, as TF Serving reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_bodies_are_read_as_tf_serving_reads_them() {
    use std::io::Write as _;
    let made = made_models();
    let url = serve(
        Protocol::TfServing,
        ENGINES[0],
        "mlp",
        &made.path().join("mlp.onnx"),
    )
    .await;
    let predict = format!("{url}/v1/models/mlp:predict");
    let body = r#"{"instances": [[1.0, 2.0, 3.0, 4.0]]}"#;
    let (status, plain) = call("POST", &predict, Some(body)).await;
    assert_eq!(status, 200, "{plain}");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(body.as_bytes()).unwrap();
    let gzipped = gz.finish().unwrap();
    let http = reqwest::Client::new();
    let send = |encoding: &'static str, bytes: Vec<u8>| {
        http.post(&predict)
            .header("content-encoding", encoding)
            .body(bytes)
            .send()
    };
    for encoding in ["gzip", "x-gzip"] {
        let res = send(encoding, gzipped.clone()).await.unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(res.json::<Value>().await.unwrap(), plain, "{encoding}");
    }
    let res = send("gzip", b"not gzip".to_vec()).await.unwrap();
    assert_eq!(res.status(), 400);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["error"], "JSON Parse error: The document is empty");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classify_answers_the_scores_predict_gives() {
    let made = made_models();
    for &engine in ENGINES {
        let url = serve(
            Protocol::TfServing,
            engine,
            "mlp",
            &made.path().join("mlp.onnx"),
        )
        .await;
        let (status, predicted) = call(
            "POST",
            &format!("{url}/v1/models/mlp:predict"),
            Some(&json!({"instances": ROWS}).to_string()),
        )
        .await;
        assert_eq!(status, 200, "{predicted}");
        let body = json!({"signature_name": "serving_default", "examples": examples()});
        let (status, classified) = call(
            "POST",
            &format!("{url}/v1/models/mlp/versions/1:classify"),
            Some(&body.to_string()),
        )
        .await;
        assert_eq!(status, 200, "{classified}");
        let results = classified["results"].as_array().unwrap();
        assert_eq!(results.len(), 3);
        for (result, probs) in results
            .iter()
            .zip(predicted["predictions"].as_array().unwrap())
        {
            let classes = result.as_array().unwrap();
            assert_eq!(classes.len(), 3);
            assert!(classes.iter().all(|c| c[0] == ""), "{result}");
            let scores: Vec<f64> = classes.iter().map(|c| c[1].as_f64().unwrap()).collect();
            assert!(close(&scores, &floats(probs)), "{result} vs {probs}");
        }
        // The context's features go with every example that lacks them.
        let body = json!({"context": {"x": [1.0, 2.0, 3.0, 4.0]}, "examples": [{}, {"x": [0.5, 0.1, -1.0, 2.0]}]});
        let (status, v) = call(
            "POST",
            &format!("{url}/v1/models/mlp:classify"),
            Some(&body.to_string()),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["results"][0], results[0]);
        assert_eq!(v["results"][1], results[1]);

        let classify = format!("{url}/v1/models/mlp:classify");
        for (body, status, error) in [
            // util/json_tensor.cc: the examples as JSON.
            (
                r#"{"examples": []}"#.to_owned(),
                400,
                "JSON Value: {\n    \"examples\": []\n} 'examples' value is an empty array".to_owned(),
            ),
            (r#"{"examples": [[1.0]]}"#.to_owned(), 400, "Example must be JSON object but got JSON Array".to_owned()),
            // TensorFlow's core/util/example_proto_fast_parsing.cc: the features as the
            // model's parse_example reads them; an integer is an int64 feature.
            (
                r#"{"examples": [{"x": [1, 2, 3, 4]}]}"#.to_owned(),
                400,
                "Name: <unknown>, Key: x, Index: 0.  Data types don't match. Data type: int64 but expected type: float".to_owned(),
            ),
            (
                r#"{"examples": [{"y": [1.0]}]}"#.to_owned(),
                400,
                "Name: <unknown>, Feature: x (data type: float) is required but could not be found.".to_owned(),
            ),
            (
                r#"{"examples": [{"x": [1.0, 2.0, 3.0, 4.0]}, {"x": [1.0]}]}"#.to_owned(),
                400,
                "Name: <unknown>, Key: x, Index: 1.  Number of float values != expected.  Values size: 1 but output shape: [4]".to_owned(),
            ),
            // servables/tensorflow/classifier.cc.
            (
                json!({"signature_name": "other", "examples": examples()}).to_string(),
                400,
                "No signature was found with the name: other".to_owned(),
            ),
        ] {
            fails("POST", &classify, Some(&body), status, &error).await;
        }
        fails(
            "POST",
            &format!("{url}/v1/models/nope:classify"),
            Some(&json!({"examples": examples()}).to_string()),
            404,
            "Servable not found for request: Latest(nope)",
        )
        .await;
        // servables/tensorflow/regressor.cc: a classification signature does not regress.
        fails(
            "POST",
            &format!("{url}/v1/models/mlp:regress"),
            Some(&json!({"examples": examples()}).to_string()),
            400,
            "Expected regression signature method_name to be tensorflow/serving/regress. Was: tensorflow/serving/classify",
        )
        .await;
    }
}

/// `:regress` on a model of one [batch, 1] output answers what ONNX Runtime computes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regress_answers_as_onnx_runtime_does() {
    let made = made_models();
    let path = made.path().join("linear.onnx");
    let code = format!(
        "import json, numpy as np, onnxruntime as ort\n\
         s = ort.InferenceSession({:?}, providers=['CPUExecutionProvider'])\n\
         print(json.dumps(s.run(None, {{'x': np.array({}, dtype=np.float32)}})[0].ravel().tolist()))",
        path.to_str().unwrap(),
        json!(ROWS)
    );
    let expected: Value = serde_json::from_str(&python(&["-c", &code])).unwrap();
    for &engine in ENGINES {
        let url = serve(Protocol::TfServing, engine, "linear", &path).await;
        let (status, meta) = call("GET", &format!("{url}/v1/models/linear/metadata"), None).await;
        assert_eq!(status, 200, "{meta}");
        assert_eq!(
            meta["metadata"]["signature_def"]["signature_def"]["serving_default"]["method_name"],
            "tensorflow/serving/regress"
        );
        let (status, v) = call(
            "POST",
            &format!("{url}/v1/models/linear:regress"),
            Some(&json!({"examples": examples()}).to_string()),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        let results = v["results"].as_array().unwrap();
        assert_eq!(results.len(), 3);
        assert!(
            close(&floats(&v["results"]), &floats(&expected)),
            "{v} vs {expected}"
        );
        // :predict on the same signature still answers, with the same values.
        let (status, p) = call(
            "POST",
            &format!("{url}/v1/models/linear:predict"),
            Some(&json!({"instances": ROWS}).to_string()),
        )
        .await;
        assert_eq!(status, 200, "{p}");
        assert!(
            close(&floats(&p["predictions"]), &floats(&v["results"])),
            "{p} vs {v}"
        );
        // servables/tensorflow/classifier.cc: a regression signature does not classify.
        fails(
            "POST",
            &format!("{url}/v1/models/linear:classify"),
            Some(&json!({"examples": examples()}).to_string()),
            400,
            "Expected classification signature method_name to be tensorflow/serving/classify. Was: tensorflow/serving/regress",
        )
        .await;
    }
}

/// A model whose outputs are neither scores nor one value per example only predicts, and
/// says so in its metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_predict_signature_neither_classifies_nor_regresses() {
    let made = made_models();
    let url = serve(
        Protocol::TfServing,
        Engine::Tract,
        "identity",
        &made.path().join("identity.onnx"),
    )
    .await;
    let (status, meta) = call("GET", &format!("{url}/v1/models/identity/metadata"), None).await;
    assert_eq!(status, 200, "{meta}");
    assert_eq!(
        meta["metadata"]["signature_def"]["signature_def"]["serving_default"]["method_name"],
        "tensorflow/serving/predict"
    );
    let body = json!({"examples": [{"in_fp32": 1.0}]}).to_string();
    for (verb, what) in [("classify", "classification"), ("regress", "regression")] {
        fails(
            "POST",
            &format!("{url}/v1/models/identity:{verb}"),
            Some(&body),
            400,
            &format!("Expected {what} signature method_name to be tensorflow/serving/{verb}. Was: tensorflow/serving/predict"),
        )
        .await;
    }
    // Its several inputs must be named in each instance (util/json_tensor.cc).
    fails(
        "POST",
        &format!("{url}/v1/models/identity:predict"),
        Some(r#"{"instances": [1, 2]}"#),
        400,
        "instances is a plain list, but expecting list of objects as multiple input tensors required as per tensorinfo_map",
    )
    .await;
}

/// TF Serving's gRPC API on the same port (`tests/check_tf_grpc.py`, with a client generated
/// from the vendored protos): Predict with `tensor_content` and typed values for every
/// datatype, compared with ONNX Runtime and REST; Classify, Regress, MultiInference,
/// GetModelMetadata and GetModelStatus; TF Serving's status codes and texts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tf_serving_grpc_answers_as_tf_serving_and_onnx_runtime_do() {
    let made = made_models();
    let script = tests_dir().join("check_tf_grpc.py");
    for name in ["mlp", "linear", "identity"] {
        let path = made.path().join(format!("{name}.onnx"));
        for &engine in ENGINES {
            let url = serve(Protocol::TfServing, engine, name, &path).await;
            let args = [
                script.to_string_lossy().into_owned(),
                url.trim_start_matches("http://").to_owned(),
                name.to_owned(),
                path.to_string_lossy().into_owned(),
            ];
            let said = tokio::task::spawn_blocking(move || {
                python(&args.iter().map(String::as_str).collect::<Vec<_>>())
            })
            .await
            .unwrap();
            assert!(said.contains("as TF Serving answers"), "{said}");
        }
    }
}
