//! Models served by kep's own model server, ONNX Runtime, a real server on the PATH and
//! Cosmos scripts, called through the gateway.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::{
    KEP, Server, StopsGracefully, cli, cli_fails, http, port0, serve, wait_available,
};

/// The model-server tests' folder: its test models' maker and its serving script.
pub(super) fn model_server_tests() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../kep-model-server/tests")
}

/// Runs a command that must succeed; its standard output.
pub(super) fn run(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The test models (`make_models.py`, with the `onnx` package) in a folder of their own.
pub(super) fn made_models() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    run(Command::new("python3")
        .arg(model_server_tests().join("make_models.py"))
        .arg(dir.path()));
    dir
}

/// A model registered once, served by kep's own model server over TF Serving REST and
/// KServe v2, called through the gateway: both answer alike.
#[test]
fn models_are_served_over_tf_serving_and_kserve_through_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let models = made_models();
    let srv = StopsGracefully(serve(dir.path(), &port0(), &[]));
    let srv = &srv.0;
    let mlp = models.path().join("mlp.onnx");
    let mlp = mlp.to_str().unwrap();

    // The signature is read from the artifact at upload.
    let m = upload_model(srv, "mlp", mlp, "pytorch");
    assert_eq!(
        m["inputs"],
        serde_json::json!([{"name": "x", "datatype": "FP32", "shape": [-1, 4]}])
    );
    assert_eq!(m["outputs"][0]["shape"], serde_json::json!([-1, 3]));
    upload_model(srv, "mlp-tf", mlp, "tensorflow");
    // What the engine cannot run is refused with the reason, before any deployment.
    let unsupported = models.path().join("unsupported.onnx");
    let err = cli_fails(
        srv,
        &[
            "serving",
            "model",
            "upload",
            "odd",
            unsupported.to_str().unwrap(),
            "--framework",
            "pytorch",
        ],
    );
    assert!(
        err.contains("HTTP 400") && err.contains("Frobnicate"),
        "{err}"
    );

    let mut keys = std::collections::HashMap::new();
    for (endpoint, deployment, kind, model) in [
        ("tri", "d1", "triton", "mlp"),
        ("tfs", "d1", "tensorflow-serving", "mlp-tf"),
    ] {
        let e = cli(srv, &["serving", "endpoint", "create", endpoint]);
        let url = e["url"].as_str().unwrap().to_owned();
        keys.insert(endpoint, (url, e["api_key"].as_str().unwrap().to_owned()));
        cli(
            srv,
            &[
                "serving",
                "deployment",
                "create",
                endpoint,
                deployment,
                "--type",
                kind,
                "--model",
                model,
            ],
        );
        wait_available(srv, endpoint, deployment);
    }
    let rows = serde_json::json!([[1.0, 2.0, 3.0, 4.0], [0.5, 0.1, -1.0, 2.0]]);
    let (status, kserve) = http(
        "POST",
        &format!("{}/v2/models/mlp/infer", keys["tri"].0),
        Some(&keys["tri"].1),
        Some(
            &serde_json::json!({"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32",
                                            "data": rows}]})
            .to_string(),
        ),
    );
    assert_eq!(status, 200, "{kserve}");
    assert_eq!(kserve["outputs"][0]["shape"], serde_json::json!([2, 3]));
    let (status, tf) = http(
        "POST",
        &format!("{}/v1/models/mlp-tf:predict", keys["tfs"].0),
        Some(&keys["tfs"].1),
        Some(&serde_json::json!({"instances": rows}).to_string()),
    );
    assert_eq!(status, 200, "{tf}");
    let flat: Vec<f64> = tf["predictions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()))
        .collect();
    let data: Vec<f64> = kserve["outputs"][0]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(flat.len(), 6);
    assert!(
        flat.iter().zip(&data).all(|(a, b)| (a - b).abs() < 1e-6),
        "{tf} {kserve}"
    );
    // Each row of probabilities sums to 1.
    assert!((data[..3].iter().sum::<f64>() - 1.0).abs() < 1e-5);

    // The real tritonclient, through the gateway: the endpoint URL as its base path, the
    // key as a header, binary tensors (its default) both ways.
    let client = r#"
import json, sys, numpy as np, tritonclient.http as http
url, key = sys.argv[1], sys.argv[2]
client = http.InferenceServerClient(url.removeprefix("http://"))
auth = {"Authorization": f"Bearer {key}"}
assert client.is_model_ready("mlp", headers=auth)
x = http.InferInput("x", [2, 4], "FP32")
x.set_data_from_numpy(np.array([[1, 2, 3, 4], [0.5, 0.1, -1, 2]], np.float32))
probs = client.infer("mlp", [x], headers=auth).as_numpy("probs")
print(json.dumps([float(p) for p in probs.ravel()]))
"#;
    let out = Command::new("python3")
        .args(["-c", client, &keys["tri"].0, &keys["tri"].1])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let got: Vec<f64> = serde_json::from_str(said.trim()).unwrap();
    assert!(
        got.iter().zip(&data).all(|(a, b)| (a - b).abs() < 1e-6),
        "{said}"
    );

    // Triton's extensions through the gateway, as against the model server itself.
    run(Command::new("python3")
        .arg(model_server_tests().join("check_triton.py"))
        .arg(keys["tri"].0.trim_start_matches("http://"))
        .args(["mlp", mlp, &keys["tri"].1]));
    // The gateway's own refusals on protocol paths are the protocol's `{"error"}`, which
    // tritonclient reads as an error, not a crash.
    let empty = cli(srv, &["serving", "endpoint", "create", "empty"]);
    let refusals = r#"
import sys, numpy as np, tritonclient.http as http
from tritonclient.utils import InferenceServerException
x = http.InferInput("x", [1, 4], "FP32")
x.set_data_from_numpy(np.ones((1, 4), np.float32))
for url, key, said in [(sys.argv[1], "wrong", "no endpoint of this name accepts this API key"),
                       (sys.argv[2], sys.argv[3], "endpoint empty has no ready instance")]:
    client = http.InferenceServerClient(url.removeprefix("http://"))
    try:
        client.infer("mlp", [x], headers={"Authorization": f"Bearer {key}"})
        sys.exit(f"{url} answered")
    except InferenceServerException as e:
        assert e.message() == said, e
"#;
    run(Command::new("python3").args([
        "-c",
        refusals,
        &keys["tri"].0,
        empty["url"].as_str().unwrap(),
        empty["api_key"].as_str().unwrap(),
    ]));
}

/// Uploads a model file with the CLI; answers the registered model.
pub(super) fn upload_model(
    srv: &Server,
    name: &str,
    file: impl AsRef<Path>,
    framework: &str,
) -> Value {
    let file = file.as_ref().to_str().unwrap();
    cli(
        srv,
        &[
            "serving",
            "model",
            "upload",
            name,
            file,
            "--framework",
            framework,
        ],
    )
}

/// The ONNX Runtime engine, chosen per deployment (`KEP_ENGINE`) or for all
/// (`serving.engine`), loaded from the onnxruntime wheel's library: it serves a model the
/// built-in engine cannot run, and a deployment that names no engine or a wrong one is
/// refused when it is made.
#[test]
fn a_deployment_may_run_its_model_in_onnx_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let models = made_models();
    let first = StopsGracefully(serve(dir.path(), &port0(), &[]));
    let srv = &first.0;
    // `Det` is not in tract: the signature is read by ONNX Runtime at upload.
    let det = models.path().join("ort_only.onnx");
    let m = upload_model(srv, "det", &det, "pytorch");
    assert_eq!(m["inputs"][0]["shape"], serde_json::json!([-1, 3, 3]));
    let e = cli(srv, &["serving", "endpoint", "create", "det"]);
    let (url, key) = (e["url"].as_str().unwrap(), e["api_key"].as_str().unwrap());
    fn create<'a>(env: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![
            "serving",
            "deployment",
            "create",
            "det",
            "d1",
            "--type",
            "triton",
            "--model",
            "det",
        ];
        for e in env {
            args.extend(["--env", e]);
        }
        args
    }
    for (env, field, said) in [
        (&[][..], "model", "Det"),
        (&["KEP_ENGINE=tract"][..], "model", "Det"),
        (
            &["KEP_ENGINE=tensorrt"][..],
            "env",
            "is not tract, onnxruntime or native",
        ),
        (
            &["KEP_ENGINE=native"][..],
            "env",
            "no tritonserver on kep's PATH",
        ),
        (
            &["KEP_ENGINE=onnxruntime", "KEP_MODEL_INSTANCES=17"][..],
            "env",
            "is not a count from 1 to 16",
        ),
    ] {
        let err = cli_fails(srv, &create(env));
        assert!(
            err.contains("HTTP 400") && err.contains(field) && err.contains(said),
            "{env:?}: {err}"
        );
    }
    // Two sessions of the model, which Triton's configuration counts as model instances.
    cli(
        srv,
        &create(&["KEP_ENGINE=onnxruntime", "KEP_MODEL_INSTANCES=2"]),
    );
    wait_available(srv, "det", "d1");
    let (status, config) = http(
        "GET",
        &format!("{url}/v2/models/det/config"),
        Some(key),
        None,
    );
    assert_eq!(status, 200, "{config}");
    assert_eq!(config["instance_group"][0]["count"], 2, "{config}");
    let matrices = serde_json::json!([
        [[2, 0, 0], [0, 3, 0], [0, 0, 4]],
        [[1, 2, 3], [4, 5, 6], [7, 8, 10]]
    ]);
    let (status, v) = http(
        "POST",
        &format!("{url}/v2/models/det/infer"),
        Some(key),
        Some(
            &serde_json::json!({"inputs": [{"name": "x", "shape": [2, 3, 3],
                                            "datatype": "FP32", "data": matrices}]})
            .to_string(),
        ),
    );
    assert_eq!(status, 200, "{v}");
    let got: Vec<f64> = v["outputs"][0]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert!(
        (got[0] - 24.0).abs() < 1e-4 && (got[1] + 3.0).abs() < 1e-4,
        "{v}"
    );
    drop(first);

    // For every deployment: `serving.engine`, with the library named by its setting.
    let lib = Command::new("python3")
        .args([
            "-c",
            "import onnxruntime, os, glob; d = os.path.dirname(onnxruntime.__file__); \
             print(glob.glob(os.path.join(d, 'capi', 'libonnxruntime.so*'))[0])",
        ])
        .output()
        .unwrap();
    let lib = String::from_utf8(lib.stdout).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let srv = StopsGracefully(serve(
        dir.path(),
        &port0(),
        &[
            ("KEP_SERVING_ENGINE", "onnxruntime"),
            ("KEP_SERVING_ONNXRUNTIME", lib.trim()),
        ],
    ));
    let srv = &srv.0;
    upload_model(srv, "det", &det, "pytorch");
    cli(srv, &["serving", "endpoint", "create", "det"]);
    cli(srv, &create(&[]));
    wait_available(srv, "det", "d1");
}

/// A PATH whose `tritonserver` and `tensorflow_model_server`, in `dir/bin`, are
/// `native_server.py`'s stand-ins for the real servers.
pub(super) fn native_servers(dir: &Path) -> String {
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/native_server.py");
    for program in ["tritonserver", "tensorflow_model_server"] {
        let script = bin.join(program);
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nexec python3 {} {KEP} {program} \"$@\"\n",
                fake.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap())
}

/// `KEP_ENGINE=native` runs the type's real server from the PATH on the model laid out for
/// it: a Triton repository (ONNX or GraphDef, with its config.pbtxt) and a TF Serving
/// SavedModel made from a frozen GraphDef. Neither server can be installed here, so
/// `native_server.py` stands in for both: it takes their command lines, checks the layout
/// as they read it, and serves with `kep model-server`.
#[test]
fn a_real_model_server_on_the_path_may_serve_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let models = made_models();
    let path = native_servers(models.path());
    let srv = StopsGracefully(serve(dir.path(), &port0(), &[("PATH", &path)]));
    let srv = &srv.0;
    let upload = |name: &str, file: &str, framework: &str| {
        let file = models.path().join(file);
        upload_model(srv, name, file, framework)
    };
    upload("mlp", "mlp.onnx", "pytorch");
    let frozen = upload("mlp-tf", "mlp.pb", "tensorflow");
    assert_eq!(frozen["inputs"][0]["shape"], serde_json::json!([-1, 4]));
    upload("mlp-onnx-tf", "mlp.onnx", "tensorflow");
    // A frozen GraphDef is a TensorFlow model's form; a PyTorch model comes as ONNX.
    let err = cli_fails(
        srv,
        &[
            "serving",
            "model",
            "upload",
            "mlp-pt",
            models.path().join("mlp.pb").to_str().unwrap(),
            "--framework",
            "pytorch",
        ],
    );
    assert!(
        err.contains("HTTP 400") && err.contains("frozen GraphDef is for tensorflow"),
        "{err}"
    );
    let deploy = |endpoint: &str, kind: &str, model: &str| {
        let e = cli(srv, &["serving", "endpoint", "create", endpoint]);
        let args = [
            "serving",
            "deployment",
            "create",
            endpoint,
            "d1",
            "--type",
            kind,
            "--model",
            model,
            "--env",
            "KEP_ENGINE=native",
        ];
        (
            e,
            Command::new(KEP)
                .args(args)
                .env("KEP_DATA_DIR", &srv.data_dir)
                .output()
                .unwrap(),
        )
    };
    let rows = serde_json::json!([[1.0, 2.0, 3.0, 4.0], [0.5, 0.1, -1.0, 2.0]]);
    let mut answers = Vec::new();
    for (endpoint, kind, model) in [
        ("tri", "triton", "mlp"),
        ("tri-tf", "triton", "mlp-tf"),
        ("tfs", "tensorflow-serving", "mlp-tf"),
    ] {
        let (e, out) = deploy(endpoint, kind, model);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        wait_available(srv, endpoint, "d1");
        let (url, key) = (e["url"].as_str().unwrap(), e["api_key"].as_str().unwrap());
        let (status, v) = if kind == "triton" {
            http(
                "POST",
                &format!("{url}/v2/models/{model}/infer"),
                Some(key),
                Some(
                    &serde_json::json!({"inputs": [{"name": "x", "shape": [2, 4],
                                                    "datatype": "FP32", "data": rows}]})
                    .to_string(),
                ),
            )
        } else {
            http(
                "POST",
                &format!("{url}/v1/models/{model}:predict"),
                Some(key),
                Some(&serde_json::json!({"instances": rows}).to_string()),
            )
        };
        assert_eq!(status, 200, "{endpoint}: {v}");
        // Flat: KServe's data, or TF Serving's rows one after another.
        let data: Vec<f64> = if kind == "triton" {
            v["outputs"][0]["data"].as_array().unwrap().clone()
        } else {
            v["predictions"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|r| r.as_array().unwrap().clone())
                .collect()
        }
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
        answers.push(data);
    }
    // The ONNX model and its frozen-graph twin agree, whichever server runs them.
    for other in &answers[1..] {
        assert!(
            other.len() == 6
                && other
                    .iter()
                    .zip(&answers[0])
                    .all(|(a, b)| (a - b).abs() < 1e-5),
            "{answers:?}"
        );
    }
    // TF Serving serves TensorFlow graphs only, and Cosmos has no native server.
    let (_, out) = deploy("tfs-onnx", "tensorflow-serving", "mlp-onnx-tf");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("HTTP 400") && err.contains("this model is onnx"),
        "{err}"
    );
}

/// A Cosmos deployment: the model with a serving script around it, given as text or as a
/// git repository cloned at deploy time, called through the gateway.
#[test]
fn a_cosmos_script_inline_or_from_a_repository_serves_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let work = made_models();
    let tests = model_server_tests();
    // A repository holding the script, as a user's would.
    let repo = work.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    std::fs::copy(tests.join("serve.rhai"), repo.join("serve.rhai")).unwrap();
    for args in [
        &["init", "-q"][..],
        &["add", "serve.rhai"],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "commit",
            "-qm",
            "script",
        ],
    ] {
        run(Command::new("git").args(args).current_dir(&repo));
    }
    let srv = StopsGracefully(serve(dir.path(), &port0(), &[]));
    let srv = &srv.0;
    let mlp = work.path().join("mlp.onnx");
    upload_model(srv, "mlp", mlp, "pytorch");
    let e = cli(srv, &["serving", "endpoint", "create", "cos"]);
    let (url, key) = (e["url"].as_str().unwrap(), e["api_key"].as_str().unwrap());
    let script_file = tests.join("serve.rhai");
    let repo_url = format!("file://{}", repo.display());
    fn create<'a>(name: &'a str, flag: &'a str, value: &'a str) -> Vec<&'a str> {
        let kind = ["--type", "cosmos", "--model", "mlp"];
        [
            &["serving", "deployment", "create", "cos", name][..],
            &kind,
            &[flag, value],
        ]
        .concat()
    }
    // A script that does not compile, or a repository that cannot be cloned, is refused
    // when the deployment is made.
    for (name, script, why) in [
        ("bad", "fn preprocess(r) { r }", "postprocess"),
        ("gone", "file:///nowhere/at/all", "git clone"),
    ] {
        let err = cli_fails(srv, &create(name, "--script", script));
        assert!(err.contains("HTTP 400") && err.contains(why), "{err}");
    }
    for (name, flag, value) in [
        ("inline", "--script-file", script_file.to_str().unwrap()),
        ("repo", "--script", repo_url.as_str()),
    ] {
        cli(srv, &create(name, flag, value));
        wait_available(srv, "cos", name);
    }
    // Both deployments answer: the second gets no traffic until the split says so.
    cli(
        srv,
        &[
            "serving",
            "traffic",
            "cos",
            "--weights",
            "inline=50,repo=50",
        ],
    );
    let body = r#"{"features": [[1, 2, 3, 4]], "names": ["a", "b", "c"]}"#;
    for _ in 0..4 {
        let (status, v) = http("POST", &format!("{url}/predict"), Some(key), Some(body));
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["labels"].as_array().unwrap().len(), 1, "{v}");
    }
    let (status, v) = http("POST", &format!("{url}/predict"), Some(key), Some("{}"));
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("no features"), "{v}");
}
