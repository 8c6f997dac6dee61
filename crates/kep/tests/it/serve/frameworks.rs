//! Models as their frameworks save them (CONTRACT §3): a TF Serving user's SavedModel
//! archive, with two versions and several signatures, and a PyTorch user's TorchScript file,
//! each run on its framework's own runtime and answering, through the gateway, what the
//! framework answers in process (`make_saved_models.py`).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use super::models::{model_server_tests, native_servers, run, upload_model};
use crate::common::{
    Server, StopsGracefully, cli, cli_fails, eventually_blocking, http, port0, serve,
    wait_available,
};

/// The models and each framework's own answers to the inputs `x`.
struct Made {
    dir: tempfile::TempDir,
    answers: Value,
}

fn made() -> Made {
    let dir = tempfile::tempdir().unwrap();
    let out = run(Command::new("python3")
        .arg(model_server_tests().join("make_saved_models.py"))
        .arg(dir.path()));
    let answers = serde_json::from_slice(&out).unwrap();
    Made { dir, answers }
}

impl Made {
    fn file(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }
}

/// Whether two JSON trees of numbers agree within 1e-5 (strings and shapes exactly).
fn close(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| close(x, y))
        }
        (Value::Number(a), Value::Number(b)) => {
            (a.as_f64().unwrap() - b.as_f64().unwrap()).abs() < 1e-5
        }
        _ => got == want,
    }
}

/// Rows of values as one flat list, as KServe answers them.
fn flat(rows: &Value) -> Value {
    (rows.as_array().unwrap().iter())
        .flat_map(|r| r.as_array().unwrap().clone())
        .collect()
}

fn assert_close(got: &Value, want: &Value) {
    assert!(close(got, want), "got {got}, the framework gives {want}");
}

/// `linear.pt`'s inputs, as its upload declares them.
const LINEAR_INPUTS: &str = r#"[{"name": "x", "datatype": "FP32", "shape": [-1, 3]}]"#;

/// `kep serving model upload NAME FILE --framework FRAMEWORK` and `extra`.
fn upload_args<'a>(
    name: &'a str,
    file: &'a Path,
    framework: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec!["serving", "model", "upload", name, file.to_str().unwrap()];
    args.extend(["--framework", framework]);
    args.extend(extra);
    args
}

/// `kep serving deployment create ENDPOINT d1 --type KIND --model MODEL` and `extra`.
fn create_args<'a>(
    endpoint: &'a str,
    kind: &'a str,
    model: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec!["serving", "deployment", "create", endpoint, "d1"];
    args.extend(["--type", kind, "--model", model]);
    args.extend(extra);
    args
}

/// An endpoint with one deployment of `kind` serving `model`, once Available: its URL
/// and key.
fn deployed(
    srv: &Server,
    endpoint: &str,
    kind: &str,
    model: &str,
    extra: &[&str],
) -> (String, String) {
    deployed_on(srv, &[endpoint], kind, model, extra)
}

/// The same, the endpoint made with `endpoint`'s flags after its name.
fn deployed_on(
    srv: &Server,
    endpoint: &[&str],
    kind: &str,
    model: &str,
    extra: &[&str],
) -> (String, String) {
    let e = cli(
        srv,
        &[&["serving", "endpoint", "create"], endpoint].concat(),
    );
    cli(srv, &create_args(endpoint[0], kind, model, extra));
    wait_available(srv, endpoint[0], "d1");
    let field = |f: &str| e[f].as_str().unwrap().to_owned();
    (field("url"), field("api_key"))
}

fn call(method: &str, url: &str, key: &str, body: Option<Value>) -> (u16, Value) {
    http(
        method,
        url,
        Some(key),
        body.map(|b| b.to_string()).as_deref(),
    )
}

#[test]
fn a_saved_model_serves_its_versions_and_signatures_as_tf_serving_does() {
    let dir = tempfile::tempdir().unwrap();
    let models = made();
    let a = &models.answers;
    let srv = StopsGracefully(serve(dir.path(), &port0(), &[]));
    let srv = &srv.0;

    let m = upload_model(srv, "dense", models.file("dense.tar.gz"), "tensorflow");
    assert_eq!(m["format"], "savedmodel");
    assert_eq!(m["versions"], json!([1, 2]));
    let names: Vec<&str> = (m["signatures"].as_array().unwrap().iter())
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["serving_default", "scores"], "{m}");
    assert_eq!(m["signatures"][0]["method"], "tensorflow/serving/predict");
    let x = json!([{"name": "x", "datatype": "FP32", "shape": [-1, 3]}]);
    assert_eq!(m["inputs"], x);
    assert_eq!(m["signatures"][1]["inputs"], x);
    assert_eq!(
        m["outputs"],
        json!([{"name": "y", "datatype": "FP32", "shape": [-1, 2]}])
    );

    let (url, key) = deployed(
        srv,
        "tfs",
        "tensorflow-serving",
        "dense",
        &["--version-policy", r#"{"all": true}"#],
    );
    // TensorFlow runs in the instance's own process: no worker beside it.
    let shown = cli(srv, &["serving", "deployment", "show", "tfs", "d1"]);
    let pid = shown["instances"][0]["pid"].as_u64().unwrap();
    assert_eq!(children(pid), Vec::<i32>::new());
    let model = format!("{url}/v1/models/dense");
    let predict =
        |path: &str, body: Value| call("POST", &format!("{model}{path}:predict"), &key, Some(body));
    let rows = json!({"instances": a["x"]});
    // The highest version by default; another by its path; another signature by name.
    let (status, got) = predict("", rows.clone());
    assert_eq!(status, 200, "{got}");
    assert_close(&got["predictions"], &a["v2"]["y"]);
    let (_, got) = predict("/versions/1", rows.clone());
    assert_close(&got["predictions"], &a["v1"]["y"]);
    let (_, got) = predict("", json!({"signature_name": "scores", "instances": a["x"]}));
    assert_close(&got["predictions"], &a["v2"]["probs"]);
    let (_, got) = predict(
        "/versions/1",
        json!({"signature_name": "scores", "inputs": {"x": a["x"]}}),
    );
    assert_close(&got["outputs"], &a["v1"]["probs"]);
    // What is not there answers as TF Serving answers it.
    let (status, got) = predict("/versions/3", rows.clone());
    assert_eq!(status, 404);
    assert_eq!(
        got["error"],
        "Servable not found for request: Specific(dense, 3)"
    );
    let (status, got) = predict("", json!({"signature_name": "nope", "instances": a["x"]}));
    assert_eq!(status, 400);
    assert_eq!(
        got["error"],
        "Serving signature name: \"nope\" not found in signature def"
    );
    // Status lists every loaded version; metadata has the SavedModel's own SignatureDefs.
    let (_, status) = call("GET", &model, &key, None);
    let versions: Vec<&str> = (status["model_version_status"].as_array().unwrap().iter())
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["2", "1"]);
    let (_, metadata) = call("GET", &format!("{model}/versions/1/metadata"), &key, None);
    assert_eq!(metadata["model_spec"]["version"], "1");
    let defs = &metadata["metadata"]["signature_def"]["signature_def"];
    assert_eq!(
        defs["scores"]["inputs"]["x"]["name"], "scores_x:0",
        "{metadata}"
    );
    assert_eq!(
        defs["serving_default"]["method_name"],
        "tensorflow/serving/predict"
    );

    // The default policy loads the latest version only.
    let (url, key) = deployed(srv, "latest", "tensorflow-serving", "dense", &[]);
    let model = format!("{url}/v1/models/dense");
    let (status, _) = call(
        "POST",
        &format!("{model}/versions/1:predict"),
        &key,
        Some(rows.clone()),
    );
    assert_eq!(status, 404);
    let (_, got) = call("POST", &format!("{model}:predict"), &key, Some(rows));
    assert_close(&got["predictions"], &a["v2"]["y"]);
}

/// The same over TF Serving's gRPC API, through the gateway to a `grpc` endpoint, by a
/// client generated from TF Serving's protos (`check_saved_model_grpc.py`).
#[test]
fn a_saved_model_answers_tf_servings_grpc_calls_through_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let models = made();
    let srv = StopsGracefully(serve(dir.path(), &port0(), &[]));
    let srv = &srv.0;
    upload_model(srv, "dense", models.file("dense.tar.gz"), "tensorflow");
    let (url, key) = deployed_on(
        srv,
        &["tfs", "--protocol", "grpc"],
        "tensorflow-serving",
        "dense",
        &["--version-policy", r#"{"all": true}"#],
    );
    let gateway = url.trim_start_matches("http://").split('/').next().unwrap();
    let answers = models.file("answers.json");
    std::fs::write(&answers, models.answers.to_string()).unwrap();
    run(Command::new("python3")
        .arg(model_server_tests().join("check_saved_model_grpc.py"))
        .args([gateway, &key, answers.to_str().unwrap()]));
}

/// A SavedModel whose signatures take serialized tf.Examples, as TF1's builder writes
/// classify and regress signatures: `:classify` and `:regress` feed them the examples.
#[test]
fn a_saved_models_classify_and_regress_signatures_take_tf_examples() {
    let dir = tempfile::tempdir().unwrap();
    let models = made();
    let a = &models.answers;
    let srv = StopsGracefully(serve(dir.path(), &port0(), &[]));
    let srv = &srv.0;
    let m = upload_model(srv, "ex", models.file("examples.zip"), "tensorflow");
    assert_eq!(m["versions"], json!([1]));
    let methods: Vec<(&str, &str)> = (m["signatures"].as_array().unwrap().iter())
        .map(|s| (s["name"].as_str().unwrap(), s["method"].as_str().unwrap()))
        .collect();
    assert_eq!(
        methods,
        [
            ("serving_default", "tensorflow/serving/classify"),
            ("regress", "tensorflow/serving/regress")
        ]
    );
    let (url, key) = deployed(srv, "ex", "tensorflow-serving", "ex", &[]);
    let examples: Vec<Value> = (a["x"].as_array().unwrap().iter())
        .map(|row| json!({"x": row}))
        .collect();
    let (status, got) = call(
        "POST",
        &format!("{url}/v1/models/ex:classify"),
        &key,
        Some(json!({"examples": examples})),
    );
    assert_eq!(status, 200, "{got}");
    let results = got["results"].as_array().unwrap();
    for (row, want) in results.iter().zip(a["classify"].as_array().unwrap()) {
        assert_eq!(row[0][0], "down");
        assert_eq!(row[1][0], "up");
        assert_close(&json!([row[0][1], row[1][1]]), want);
    }
    let (status, got) = call(
        "POST",
        &format!("{url}/v1/models/ex:regress"),
        &key,
        Some(json!({"signature_name": "regress", "examples": examples})),
    );
    assert_eq!(status, 200, "{got}");
    assert_close(&got["results"], &a["regress"]);
    // The classify signature is no regression.
    let (status, got) = call(
        "POST",
        &format!("{url}/v1/models/ex:regress"),
        &key,
        Some(json!({"examples": examples})),
    );
    assert_eq!(status, 400);
    assert!(
        got["error"]
            .as_str()
            .unwrap()
            .contains("regression signature method_name"),
        "{got}"
    );
}

#[test]
fn a_torchscript_module_serves_on_triton_with_the_inputs_declared_at_upload() {
    let dir = tempfile::tempdir().unwrap();
    let models = made();
    let a = &models.answers;
    let srv = StopsGracefully(serve(dir.path(), &port0(), &[]));
    let srv = &srv.0;
    let file = models.file("linear.pt");
    let m = cli(
        srv,
        &upload_args("linear", &file, "pytorch", &["--inputs", LINEAR_INPUTS]),
    );
    assert_eq!(m["format"], "torchscript");
    assert_eq!(m["versions"], json!([1]));
    assert_eq!(
        m["outputs"],
        json!([{"name": "OUTPUT__0", "datatype": "FP32", "shape": [-1, 2]}])
    );
    let (url, key) = deployed(srv, "tri", "triton", "linear", &[]);
    let infer = || {
        let body = json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [4, 3],
                                      "data": a["x"]}]});
        call(
            "POST",
            &format!("{url}/v2/models/linear/infer"),
            &key,
            Some(body),
        )
    };
    let (status, got) = infer();
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["model_version"], "1");
    assert_eq!(got["outputs"][0]["shape"], json!([4, 2]));
    assert_close(&got["outputs"][0]["data"], &flat(&a["linear"]));
    let (_, config) = call("GET", &format!("{url}/v2/models/linear/config"), &key, None);
    assert_eq!(config["platform"], "pytorch_libtorch");
    let (status, _) = call(
        "GET",
        &format!("{url}/v2/models/linear/versions/2"),
        &key,
        None,
    );
    assert_eq!(status, 404);

    // A traced module, as most PyTorch users save one, serves alike.
    let traced = models.file("traced.pt");
    let args = upload_args("traced", &traced, "pytorch", &["--inputs", LINEAR_INPUTS]);
    assert_eq!(cli(srv, &args)["outputs"], m["outputs"]);
    let (traced_url, traced_key) = deployed(srv, "traced", "triton", "traced", &[]);
    let body =
        json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [4, 3], "data": a["x"]}]});
    let url_of = format!("{traced_url}/v2/models/traced/infer");
    let (status, got) = call("POST", &url_of, &traced_key, Some(body));
    assert_eq!(status, 200, "{got}");
    assert_close(&got["outputs"][0]["data"], &flat(&a["linear"]));

    // libtorch runs inside the instance's process, in the framework Python's interpreter;
    // an instance that dies with it is restarted, and loads the module again.
    let shown = cli(srv, &["serving", "deployment", "show", "tri", "d1"]);
    let pid = shown["instances"][0]["pid"].as_u64().unwrap();
    assert_eq!(children(pid), Vec::<i32>::new());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    eventually_blocking(Duration::from_secs(60), "the instance restarts", || {
        let shown = cli(srv, &["serving", "deployment", "show", "tri", "d1"]);
        let instance = &shown["instances"][0];
        if instance["restarts"].as_u64() >= Some(1) && instance["ready"] == true {
            Ok(())
        } else {
            Err(instance.to_string())
        }
    });
    let (status, got) = infer();
    assert_eq!(status, 200, "{got}");
    assert_close(&got["outputs"][0]["data"], &flat(&a["linear"]));
}

/// The processes `pid` started: each is the child of the thread that started it, which
/// may be any of them.
fn children(pid: u64) -> Vec<i32> {
    let children: String = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|t| std::fs::read_to_string(t.unwrap().path().join("children")).unwrap_or_default())
        .collect();
    children
        .split_whitespace()
        .map(|c| c.parse().unwrap())
        .collect()
}

/// A tar.gz of `(name, bytes)` entries, names as given (`..` too), as a hostile archive.
fn hostile_tar(path: &Path, entries: &[(&str, &[u8])]) {
    let script = "import io, json, sys, tarfile\n\
        with tarfile.open(sys.argv[1], 'w:gz') as t:\n\
        \x20   for name, data in json.loads(sys.argv[2]):\n\
        \x20       info = tarfile.TarInfo(name); b = data.encode(); info.size = len(b)\n\
        \x20       t.addfile(info, io.BytesIO(b))\n";
    let entries: Vec<(&str, String)> = (entries.iter())
        .map(|(n, d)| (*n, String::from_utf8_lossy(d).into_owned()))
        .collect();
    let status = Command::new("python3")
        .args(["-c", script, path.to_str().unwrap()])
        .arg(serde_json::to_string(&entries).unwrap())
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn framework_models_that_do_not_fit_are_refused_and_nothing_is_registered() {
    let dir = tempfile::tempdir().unwrap();
    let models = made();
    let srv = StopsGracefully(serve(dir.path(), &port0(), &[]));
    let srv = &srv.0;
    let upload = |name: &str, file: &Path, framework: &str, extra: &[&str]| {
        cli_fails(srv, &upload_args(name, file, framework, extra))
    };
    let refused = |err: String, words: &str| {
        assert!(
            err.contains("HTTP 400") && err.contains(words),
            "{words}: {err}"
        );
    };
    let dense = models.file("dense.tar.gz");
    let linear = models.file("linear.pt");
    let x = LINEAR_INPUTS;
    refused(upload("ma", &dense, "pytorch", &[]), "framework tensorflow");
    refused(
        upload("mb", &linear, "tensorflow", &["--inputs", x]),
        "framework pytorch",
    );
    refused(
        upload("mc", &linear, "pytorch", &[]),
        "needs the part `inputs`",
    );
    refused(
        upload(
            "md",
            &linear,
            "pytorch",
            &["--inputs", &x.replace("\"x\"", "\"y\"")],
        ),
        "forward",
    );
    refused(
        upload("me", &dense, "tensorflow", &["--inputs", x]),
        "TorchScript file only",
    );
    let corrupt = models.file("corrupt.tar.gz");
    std::fs::write(&corrupt, b"\x1f\x8b\x08\x00 this is no gzip stream").unwrap();
    refused(
        upload("mf", &corrupt, "tensorflow", &[]),
        "archive cannot be read",
    );
    let escape = models.file("escape.tar.gz");
    hostile_tar(&escape, &[("saved_model.pb", b"x"), ("../../evil", b"e")]);
    refused(
        upload("mg", &escape, "tensorflow", &[]),
        "leaves its folder",
    );
    assert!(!models.dir.path().parent().unwrap().join("evil").exists());
    let empty = models.file("empty.tar.gz");
    hostile_tar(&empty, &[("m/notes.txt", b"no model here")]);
    refused(upload("mh", &empty, "tensorflow", &[]), "no saved_model.pb");
    let broken = models.file("broken.pt");
    let mut bytes = std::fs::read(&linear).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&broken, bytes).unwrap();
    refused(upload("mi", &broken, "pytorch", &["--inputs", x]), "file");
    assert_eq!(cli(srv, &["serving", "model", "list"]), json!([]));

    // A version the model does not have, or a policy that names none, is refused when the
    // deployment is made.
    upload_model(srv, "dense", &dense, "tensorflow");
    cli(srv, &["serving", "endpoint", "create", "tfs"]);
    for (policy, words) in [
        (
            r#"{"specific": [3]}"#,
            "no version 3: its versions are 1, 2",
        ),
        (r#"{"latest": 0}"#, "latest must be at least 1"),
    ] {
        let err = cli_fails(
            srv,
            &create_args(
                "tfs",
                "tensorflow-serving",
                "dense",
                &["--version-policy", policy],
            ),
        );
        refused(err, words);
    }
    assert_eq!(
        cli(srv, &["serving", "deployment", "list", "tfs"]),
        json!([])
    );
}

/// A kep whose Python has no framework refuses their models at upload, naming the package.
#[test]
fn a_format_whose_runtime_is_missing_is_refused_at_upload_with_what_to_install() {
    let dir = tempfile::tempdir().unwrap();
    let models = made();
    // The same Python without its site-packages: no TensorFlow, no torch.
    let bare = models.file("bare-python");
    std::fs::write(&bare, "#!/bin/sh\nexec python3 -S \"$@\"\n").unwrap();
    std::fs::set_permissions(&bare, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let srv = StopsGracefully(serve(
        dir.path(),
        &port0(),
        &[("KEP_SERVING_FRAMEWORK_PYTHON", bare.to_str().unwrap())],
    ));
    let srv = &srv.0;
    let dense = models.file("dense.tar.gz");
    let err = cli_fails(srv, &upload_args("dense", &dense, "tensorflow", &[]));
    assert!(
        err.contains("HTTP 400") && err.contains("pip install") && err.contains("tensorflow-cpu"),
        "{err}"
    );
    let linear = models.file("linear.pt");
    let err = cli_fails(
        srv,
        &upload_args("linear", &linear, "pytorch", &["--inputs", LINEAR_INPUTS]),
    );
    assert!(err.contains("HTTP 400") && err.contains("torch"), "{err}");
    assert_eq!(cli(srv, &["serving", "model", "list"]), json!([]));
}

/// `KEP_ENGINE=native`: the real servers get a SavedModel's versions and a TorchScript
/// file in their own layouts, with the version policy in their own configuration
/// (`native_server.py` stands in for them, reading the layouts as they do).
#[test]
fn the_real_servers_get_framework_models_in_their_own_layouts() {
    let dir = tempfile::tempdir().unwrap();
    let models = made();
    let a = &models.answers;
    let path = native_servers(models.dir.path());
    let srv = StopsGracefully(serve(dir.path(), &port0(), &[("PATH", &path)]));
    let srv = &srv.0;
    upload_model(srv, "dense", models.file("dense.tar.gz"), "tensorflow");
    let file = models.file("linear.pt");
    cli(
        srv,
        &upload_args("linear", &file, "pytorch", &["--inputs", LINEAR_INPUTS]),
    );
    let native = ["--env", "KEP_ENGINE=native"];
    let all = ["--version-policy", r#"{"specific": [1, 2]}"#];
    let rows = json!({"instances": a["x"]});
    let (url, key) = deployed(
        srv,
        "tfs",
        "tensorflow-serving",
        "dense",
        &[&native[..], &all[..]].concat(),
    );
    let (_, got) = call(
        "POST",
        &format!("{url}/v1/models/dense/versions/1:predict"),
        &key,
        Some(rows.clone()),
    );
    assert_close(&got["predictions"], &a["v1"]["y"]);
    let (url, key) = deployed(
        srv,
        "tri",
        "triton",
        "dense",
        &[&native[..], &all[..]].concat(),
    );
    let infer =
        json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [4, 3], "data": a["x"]}]});
    let (status, got) = call(
        "POST",
        &format!("{url}/v2/models/dense/versions/1/infer"),
        &key,
        Some(infer.clone()),
    );
    assert_eq!(status, 200, "{got}");
    assert_close(&got["outputs"][0]["data"], &flat(&a["v1"]["y"]));
    let (url, key) = deployed(srv, "pt", "triton", "linear", &native);
    let (status, got) = call(
        "POST",
        &format!("{url}/v2/models/linear/infer"),
        &key,
        Some(infer),
    );
    assert_eq!(status, 200, "{got}");
    assert_close(&got["outputs"][0]["data"], &flat(&a["linear"]));
    // TF Serving serves TensorFlow's models only, natively as on kep's server.
    cli(srv, &["serving", "endpoint", "create", "odd"]);
    let err = cli_fails(
        srv,
        &create_args("odd", "tensorflow-serving", "linear", &native),
    );
    assert!(err.contains("HTTP 400"), "{err}");
}
