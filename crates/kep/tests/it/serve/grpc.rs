//! gRPC through the gateway: `grpc` endpoints' `triton` and `tensorflow-serving`
//! deployments called by their protocols' own clients, the endpoint named by its key.

use std::process::Command;

use super::models::{made_models, model_server_tests, upload_model};
use crate::common::{Server, StopsGracefully, cli, port0, serve, wait_available};

/// A `grpc` endpoint with one deployment `d1` of `kind` serving `model`, once Available:
/// its URL and key.
fn grpc_deployment(srv: &Server, endpoint: &str, kind: &str, model: &str) -> (String, String) {
    let e = cli(
        srv,
        &[
            "serving",
            "endpoint",
            "create",
            endpoint,
            "--protocol",
            "grpc",
        ],
    );
    cli(
        srv,
        &[
            "serving",
            "deployment",
            "create",
            endpoint,
            "d1",
            "--type",
            kind,
            "--model",
            model,
        ],
    );
    wait_available(srv, endpoint, "d1");
    let field = |f: &str| e[f].as_str().unwrap().to_owned();
    (field("url"), field("api_key"))
}

/// A `grpc` endpoint's `triton` deployment through the gateway: `tritonclient.grpc` on the
/// gateway's address, the endpoint named by the key in the `authorization` metadata; a
/// stream passed through open; compressed messages passed on; REST calls go over HTTP/2 to
/// the same instances; the gateway's refusals are gRPC statuses.
#[test]
fn tritonclient_grpc_reaches_a_grpc_endpoint_through_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let models = made_models();
    let srv = StopsGracefully(serve(dir.path(), &port0(), &[]));
    let srv = &srv.0;
    let mlp = models.path().join("mlp.onnx");
    upload_model(srv, "mlp", &mlp, "pytorch");
    let (url, key) = grpc_deployment(srv, "grpc", "triton", "mlp");
    let (url, key) = (url.as_str(), key.as_str());
    let empty = cli(
        srv,
        &[
            "serving",
            "endpoint",
            "create",
            "empty",
            "--protocol",
            "grpc",
        ],
    );

    let client = r#"
import json, queue, sys, urllib.request
import numpy as np, tritonclient.grpc as grpc
from tritonclient.utils import InferenceServerException
url, key, empty_key = sys.argv[1:4]
target = url.removeprefix("http://").split("/")[0]
auth = {"authorization": f"Bearer {key}"}
client = grpc.InferenceServerClient(target)
assert client.is_server_live(headers=auth) and client.is_model_ready("mlp", headers=auth)
assert client.get_server_metadata(headers=auth).name == "triton"
assert client.get_model_config("mlp", headers=auth).config.platform == "onnxruntime_onnx"
rows = np.array([[1, 2, 3, 4], [0.5, 0.1, -1, 2]], np.float32)
x = grpc.InferInput("x", [2, 4], "FP32")
x.set_data_from_numpy(rows)
probs = client.infer("mlp", [x], headers=auth).as_numpy("probs")
# A compressed message passes through as it is, and is inflated by the instance.
for algorithm in ["gzip", "deflate"]:
    got = client.infer("mlp", [x], headers=auth, compression_algorithm=algorithm).as_numpy("probs")
    assert np.allclose(got, probs), (algorithm, got, probs)
# A stream (ModelStreamInfer) passes through as it comes: an answer per request, in order.
answers = queue.Queue()
client.start_stream(lambda result, error: answers.put((result, error)), headers=auth)
for i, model in enumerate(["mlp", "nope", "mlp"]):
    client.async_stream_infer(model, [x], request_id=f"s{i}")
    if i == 0:  # the first answer comes while the stream is still open
        r, e = answers.get(timeout=60)
        assert e is None and r.get_response().id == "s0" and np.allclose(r.as_numpy("probs"), probs), (r, e)
(r1, e1), (r2, e2) = answers.get(timeout=60), answers.get(timeout=60)
client.stop_stream()
assert r1 is None and e1.message() == "Request for unknown model: 'nope' is not found", e1
assert e2 is None and r2.get_response().id == "s2" and np.allclose(r2.as_numpy("probs"), probs), (r2, e2)
(stats,) = client.get_inference_statistics("mlp", headers=auth).model_stats
assert stats.inference_stats.success.count == 5, stats
# REST on the same gRPC endpoint: over HTTP/2 to the same instance.
body = json.dumps({"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32",
                               "data": rows.ravel().tolist()}]}).encode()
req = urllib.request.Request(f"{url}/v2/models/mlp/infer", data=body,
                             headers={"Authorization": f"Bearer {key}"})
rest = json.loads(urllib.request.urlopen(req).read())["outputs"][0]["data"]
assert np.allclose(rest, probs.ravel(), atol=1e-6), (rest, probs)
for headers, status, said in [
        ({"authorization": "Bearer wrong"}, "UNAUTHENTICATED", "no endpoint of this name accepts this API key"),
        ({}, "UNAUTHENTICATED", "no endpoint of this name accepts this API key"),
        ({"authorization": f"Bearer {empty_key}"}, "UNAVAILABLE", "endpoint empty has no ready instance")]:
    try:
        client.infer("mlp", [x], headers=headers)
        sys.exit(f"{headers} answered")
    except InferenceServerException as e:
        assert (e.status(), e.message()) == (f"StatusCode.{status}", said), e
print(json.dumps(probs.ravel().tolist()))
"#;
    let out = Command::new("python3")
        .args(["-c", client, url, key, empty["api_key"].as_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let probs: Vec<f64> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(probs.len(), 6);
    assert!(
        (probs[..3].iter().sum::<f64>() - 1.0).abs() < 1e-5,
        "{probs:?}"
    );
}

/// A `tensorflow-serving` deployment on a `grpc` endpoint: TF Serving's gRPC Predict through
/// the gateway, the endpoint named by the key in the `authorization` metadata, with a client
/// generated from the model server's vendored protos (`check_tf_grpc.py`).
#[test]
fn tf_serving_grpc_predict_reaches_a_grpc_endpoint_through_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let models = made_models();
    let srv = StopsGracefully(serve(dir.path(), &port0(), &[]));
    let srv = &srv.0;
    let mlp = models.path().join("mlp.onnx");
    upload_model(srv, "mlp-tf", &mlp, "tensorflow");
    let (url, key) = grpc_deployment(srv, "tfs", "tensorflow-serving", "mlp-tf");
    let (url, key) = (url.as_str(), key.as_str());
    let gateway = url.trim_start_matches("http://").split('/').next().unwrap();
    let out = Command::new("python3")
        .arg(model_server_tests().join("check_tf_grpc.py"))
        .args([gateway, "mlp-tf", mlp.to_str().unwrap(), key])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Predict through the gateway"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
