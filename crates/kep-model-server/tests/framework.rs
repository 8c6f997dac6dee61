//! SavedModels and TorchScript run by TensorFlow and libtorch in the framework worker, with
//! `python3` from PATH (tensorflow-cpu and torch installed): the answers are those the
//! frameworks give in process (`make_saved_models.py`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use kep_model_server::framework::{SignatureDef, Worker};
use kep_model_server::model::{Format, Input, Model};
use kep_model_server::{DataType, ModelError, TensorSpec, tensor};
use serde_json::Value;
use tract_onnx::prelude::*;

/// The models, made once, and the answers the frameworks gave.
struct Made {
    dir: tempfile::TempDir,
    answers: Value,
}

fn made() -> &'static Made {
    static MADE: OnceLock<Made> = OnceLock::new();
    MADE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/make_saved_models.py");
        let out = Command::new("python3")
            .arg(script)
            .arg(dir.path())
            .env("TF_CPP_MIN_LOG_LEVEL", "2")
            .output()
            .expect("python3 on PATH");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let answers = serde_json::from_slice(&out.stdout).unwrap();
        Made { dir, answers }
    })
}

fn path(name: &str) -> PathBuf {
    made().dir.path().join(name)
}

/// One worker for the tests that do not stop it, with every model loaded.
fn worker() -> &'static Arc<Worker> {
    static WORKER: OnceLock<Arc<Worker>> = OnceLock::new();
    WORKER.get_or_init(|| {
        let worker = Worker::start().unwrap();
        worker.load_saved_model("dense", &path("dense/1")).unwrap();
        worker
            .load_torchscript("linear", &path("linear.pt"), &[x_spec()])
            .unwrap();
        worker
            .load_torchscript(
                "two",
                &path("two.pt"),
                &[x_spec(), spec("idx", DataType::Int64, &[-1])],
            )
            .unwrap();
        worker
    })
}

fn spec(name: &str, datatype: DataType, shape: &[i64]) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        datatype,
        shape: shape.to_vec(),
    }
}

fn x_spec() -> TensorSpec {
    spec("x", DataType::Fp32, &[-1, 3])
}

/// The answers' nested lists at `key` (a path: `v1/y`; at `index` where a model gave
/// several) as floats.
fn expected(key: &str, index: Option<usize>) -> Vec<f64> {
    let mut v = &made().answers;
    for part in key.split('/') {
        v = &v[part];
    }
    if let Some(i) = index {
        v = &v[i];
    }
    let mut flat = Vec::new();
    fn walk(v: &Value, out: &mut Vec<f64>) {
        match v {
            Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            other => out.push(other.as_f64().unwrap()),
        }
    }
    walk(v, &mut flat);
    flat
}

fn x() -> Tensor {
    let x: Vec<f32> = expected("x", None).iter().map(|&v| v as f32).collect();
    Tensor::from_shape(&[4, 3], &x).unwrap()
}

fn idx() -> Tensor {
    let idx: Vec<i64> = expected("idx", None).iter().map(|&v| v as i64).collect();
    Tensor::from_shape(&[4], &idx).unwrap()
}

fn assert_close(got: &Tensor, want: &[f64]) {
    let got: Vec<f64> = (got.cast_to::<f64>().unwrap())
        .to_plain_array_view::<f64>()
        .unwrap()
        .iter()
        .copied()
        .collect();
    assert_eq!(got.len(), want.len(), "{got:?} against {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-5, "{got:?} against {want:?}");
    }
}

#[test]
fn a_saved_model_runs_each_of_its_signatures_in_tensorflow() {
    let worker = Worker::start().unwrap();
    let signatures = worker.load_saved_model("dense", &path("dense/1")).unwrap();
    let predict = Some("tensorflow/serving/predict".to_owned());
    assert_eq!(
        signatures,
        [
            SignatureDef {
                name: "serving_default".into(),
                method: predict.clone(),
                inputs: vec![x_spec()],
                outputs: vec![spec("y", DataType::Fp32, &[-1, 2])],
            },
            SignatureDef {
                name: "scores".into(),
                method: predict,
                inputs: vec![x_spec()],
                outputs: vec![spec("probs", DataType::Fp32, &[-1, 2])],
            },
        ]
    );
    for (signature, output) in [("serving_default", "y"), ("scores", "probs")] {
        let got = worker
            .run(
                "dense",
                signature,
                vec![("x".into(), x())],
                &[output.into()],
            )
            .unwrap();
        assert_close(&got[0], &expected(&format!("v1/{output}"), None));
    }
    // As the server runs it: a Model, whose inputs are checked before the worker sees them.
    let model = Model::in_framework(worker, "dense", Format::SavedModel, &signatures[1]);
    assert_eq!(model.engine_name(), "tensorflow");
    let got = model.run(vec![("x".into(), Input::from(x()))]).unwrap();
    assert_close(&got[0], &expected("v1/probs", None));
    let wrong = Tensor::zero::<f32>(&[2, 4]).unwrap();
    assert!(matches!(
        model.run(vec![("x".into(), Input::from(wrong))]),
        Err(ModelError::BadInput(_))
    ));
}

#[test]
fn a_saved_model_takes_and_gives_strings() {
    let worker = worker();
    let signatures = worker
        .load_saved_model("strings", &path("strings"))
        .unwrap();
    assert_eq!(signatures.len(), 1);
    assert_eq!(signatures[0].inputs, [spec("s", DataType::Bytes, &[-1])]);
    assert_eq!(
        signatures[0].outputs,
        [
            spec("length", DataType::Int32, &[-1]),
            spec("upper", DataType::Bytes, &[-1]),
        ]
    );
    // The binary tensor format: each element a u32 length and its bytes (UTF-8, as kep's
    // BYTES tensors are text).
    let binary = |items: &[&str]| -> Vec<u8> {
        let length = |i: &str| (i.len() as u32).to_le_bytes();
        items
            .iter()
            .flat_map(|i| [&length(i)[..], i.as_bytes()].concat())
            .collect()
    };
    let given = ["kep", "", "café!"];
    let s = tensor::from_bytes(DataType::Bytes, &[3], &binary(&given)).unwrap();
    let outputs = ["upper".into(), "length".into()];
    let got = (worker.run(
        "strings",
        "serving_default",
        vec![("s".into(), s)],
        &outputs,
    ))
    .unwrap();
    // TensorFlow's upper and length work on bytes: é is left as it is, and counts two.
    let upper = binary(&["KEP", "", "CAFé!"]);
    assert_eq!(tensor::to_bytes(&got[0], DataType::Bytes).unwrap(), upper);
    assert_eq!(got[1], Tensor::from_shape(&[3], &[3i32, 0, 6]).unwrap());
}

#[test]
fn torchscript_runs_in_libtorch_with_its_outputs_learnt() {
    let worker = worker();
    let linear = worker
        .load_torchscript("linear", &path("linear.pt"), &[x_spec()])
        .unwrap();
    assert_eq!(
        linear,
        SignatureDef {
            name: "forward".into(),
            method: None,
            inputs: vec![x_spec()],
            outputs: vec![spec("OUTPUT__0", DataType::Fp32, &[-1, 2])],
        }
    );
    let model = Model::in_framework(worker.clone(), "linear", Format::TorchScript, &linear);
    assert_eq!(model.engine_name(), "libtorch");
    let got = model.run(vec![("x".into(), Input::from(x()))]).unwrap();
    assert_close(&got[0], &expected("linear", None));

    let inputs = [x_spec(), spec("idx", DataType::Int64, &[-1])];
    let two = worker
        .load_torchscript("two", &path("two.pt"), &inputs)
        .unwrap();
    assert_eq!(
        two.outputs,
        [
            spec("OUTPUT__0", DataType::Fp32, &[-1, 2]),
            spec("OUTPUT__1", DataType::Int64, &[-1]),
        ]
    );
    let outputs = ["OUTPUT__0".into(), "OUTPUT__1".into()];
    let given = vec![("x".into(), x()), ("idx".into(), idx())];
    let got = worker.run("two", "forward", given, &outputs).unwrap();
    assert_close(&got[0], &expected("two", Some(0)));
    assert_eq!(got[1].datum_type(), i64::datum_type());
    assert_close(&got[1], &expected("two", Some(1)));
}

#[test]
fn what_does_not_load_or_run_says_why() {
    let worker = worker();
    let corrupt = made().dir.path().join("corrupt.pt");
    std::fs::write(&corrupt, b"not a zip archive").unwrap();
    let err = worker
        .load_torchscript("corrupt", &corrupt, &[x_spec()])
        .unwrap_err();
    assert!(matches!(err, ModelError::Unreadable(_)), "{err}");

    let err = worker
        .load_torchscript(
            "named",
            &path("two.pt"),
            &[spec("a", DataType::Fp32, &[-1, 3])],
        )
        .unwrap_err();
    let ModelError::Unreadable(message) = err else {
        panic!("{err}")
    };
    assert!(message.contains("forward's arguments: x, idx"), "{message}");

    let err = worker
        .run("dense", "nope", vec![("x".into(), x())], &["y".into()])
        .unwrap_err();
    assert!(err.to_string().contains("no signature nope"), "{err}");
    let err = worker
        .load_saved_model("missing", &path("nowhere"))
        .unwrap_err();
    assert!(matches!(err, ModelError::Unreadable(_)), "{err}");
}

#[test]
fn a_missing_framework_or_python_names_what_to_install() {
    // The system's Python, without torch or TensorFlow.
    let python = Path::new("/usr/bin/python3");
    let worker = Worker::start_with(python).unwrap();
    let err = worker
        .load_torchscript("linear", &path("linear.pt"), &[x_spec()])
        .unwrap_err();
    let ModelError::EngineUnavailable(message) = err else {
        panic!("{err}")
    };
    assert!(
        message.contains("/usr/bin/python3: pip install torch"),
        "{message}"
    );
    let err = worker
        .load_saved_model("dense", &path("dense/1"))
        .unwrap_err();
    assert!(
        err.to_string().contains("pip install tensorflow-cpu"),
        "{err}"
    );
    assert!(worker.is_alive());

    let err = Worker::start_with(Path::new("/nonexistent/python3"))
        .err()
        .unwrap();
    assert!(matches!(err, ModelError::EngineUnavailable(_)), "{err}");
}

#[test]
fn calls_from_four_threads_get_their_own_answers() {
    let worker = worker();
    std::thread::scope(|s| {
        for i in 0..4 {
            s.spawn(move || {
                for _ in 0..20 {
                    if i % 2 == 0 {
                        let got = worker
                            .run(
                                "dense",
                                "serving_default",
                                vec![("x".into(), x())],
                                &["y".into()],
                            )
                            .unwrap();
                        assert_close(&got[0], &expected("v1/y", None));
                    } else {
                        let outputs = ["OUTPUT__1".into()];
                        let given = vec![("x".into(), x()), ("idx".into(), idx())];
                        let got = worker.run("two", "forward", given, &outputs).unwrap();
                        assert_close(&got[0], &expected("two", Some(1)));
                    }
                }
            });
        }
    });
}

#[test]
fn a_worker_that_dies_fails_its_calls() {
    let worker = Worker::start().unwrap();
    worker
        .load_torchscript("linear", &path("linear.pt"), &[x_spec()])
        .unwrap();
    assert!(worker.is_alive());
    let killed = Command::new("kill")
        .args(["-9", &worker.pid().unwrap().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let err = worker
        .run(
            "linear",
            "forward",
            vec![("x".into(), x())],
            &["OUTPUT__0".into()],
        )
        .unwrap_err();
    let ModelError::Failed(message) = err else {
        panic!("{err}")
    };
    assert!(
        message.starts_with("the framework worker exited"),
        "{message}"
    );
    assert!(!worker.is_alive());
}

/// A SavedModel archive loaded as a model server loads it, every version, and called
/// directly over TF Serving's REST API: the framework's answers, by version and signature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_saved_model_answers_by_version_and_signature_directly() {
    use kep_model_server::versions::{self, VersionPolicy};
    use kep_model_server::{Engine, Protocol, Served};
    let archive = path("dense.tar.gz");
    let all = VersionPolicy::All(true);
    let loaded = tokio::task::spawn_blocking(move || {
        versions::load(&archive, Engine::Tract, &all, None, Default::default())
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(loaded.available, [1, 2]);
    let (versions, _worker, _dir) = (loaded.versions, loaded.worker, loaded.unpacked);
    let served = Arc::new(Served::new("dense", versions));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tf = format!("http://{}", listener.local_addr().unwrap());
    let app = kep_model_server::router(Protocol::TfServing, served, None);
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::new();
    let x = made().answers["x"].clone();
    let post = |url: String, body: Value| {
        let client = client.clone();
        async move {
            let answer = client.post(url).json(&body).send().await.unwrap();
            assert_eq!(answer.status(), 200);
            answer.json::<Value>().await.unwrap()
        }
    };
    let flat = |v: &Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()))
            .collect()
    };
    let check = |got: Vec<f64>, key: &str| {
        let want = expected(key, None);
        assert!(
            got.iter().zip(&want).all(|(g, w)| (g - w).abs() < 1e-5) && got.len() == want.len(),
            "{got:?} {want:?}"
        );
    };
    let got = post(
        format!("{tf}/v1/models/dense:predict"),
        serde_json::json!({"instances": x}),
    )
    .await;
    check(flat(&got["predictions"]), "v2/y");
    let body = serde_json::json!({"signature_name": "scores", "instances": x});
    let got = post(format!("{tf}/v1/models/dense/versions/1:predict"), body).await;
    check(flat(&got["predictions"]), "v1/probs");
}

/// A SavedModel loaded as a model server's instance loads it, in its own process through
/// TensorFlow's C API: the same signatures as the worker reads, the framework's answers,
/// strings of every length TensorFlow stores apart (inline up to 22 bytes, allocated past).
#[test]
fn a_saved_model_runs_in_process_with_the_signatures_the_worker_reads() {
    use kep_model_server::Engine;
    use kep_model_server::versions::{self, Runtime, VersionPolicy};
    let all = VersionPolicy::All(true);
    let runtime = Runtime {
        threads: Some(2),
        instances: 1,
        in_process: true,
    };
    let in_process = versions::load(&path("dense.tar.gz"), Engine::Tract, &all, None, runtime);
    let in_process = in_process.unwrap();
    assert!(in_process.worker.is_none(), "no worker process runs it");
    let in_worker = versions::load(
        &path("dense.tar.gz"),
        Engine::Tract,
        &all,
        None,
        Runtime::default(),
    );
    let in_worker = in_worker.unwrap();
    assert!(in_worker.worker.is_some());
    assert_eq!(in_process.available, [1, 2]);
    for (version, other) in in_process.versions.iter().zip(&in_worker.versions) {
        let described = |v: &kep_model_server::Version| -> Vec<_> {
            (v.signatures.iter())
                .map(|s| {
                    (
                        s.name.clone(),
                        s.method.clone(),
                        s.model.inputs.clone(),
                        s.model.outputs.clone(),
                    )
                })
                .collect()
        };
        assert_eq!(described(version), described(other));
        for signature in &version.signatures {
            assert_eq!(signature.model.engine_name(), "tensorflow");
            let got = signature
                .model
                .run(vec![("x".into(), Input::from(x()))])
                .unwrap();
            let output = &signature.model.outputs[0].name;
            assert_close(
                &got[0],
                &expected(&format!("v{}/{output}", version.number), None),
            );
        }
    }
    // The session checks what the graph would refuse: the model's inputs come first.
    let model = in_process.versions[0].model();
    let wrong = Tensor::zero::<f32>(&[2, 4]).unwrap();
    assert!(matches!(
        model.run(vec![("x".into(), Input::from(wrong))]),
        Err(ModelError::BadInput(_))
    ));

    let strings = versions::load(&path("strings.zip"), Engine::Tract, &all, None, runtime);
    let strings = strings.unwrap();
    let model = strings.versions[0].model();
    let long = "twenty-three bytes long, and then some more";
    let given = ["kep", "", "exactly twenty-two b.", long];
    let binary = |items: &[&str]| -> Vec<u8> {
        (items.iter())
            .flat_map(|i| [&(i.len() as u32).to_le_bytes()[..], i.as_bytes()].concat())
            .collect()
    };
    let s = tensor::from_bytes(DataType::Bytes, &[4], &binary(&given)).unwrap();
    let got = model.run(vec![("s".into(), Input::from(s))]).unwrap();
    let names: Vec<&str> = model.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["length", "upper"]);
    let lengths: Vec<i32> = given.iter().map(|g| g.len() as i32).collect();
    assert_eq!(got[0], Tensor::from_shape(&[4], &lengths).unwrap());
    let upper: Vec<String> = given.iter().map(|g| g.to_uppercase()).collect();
    let upper: Vec<&str> = upper.iter().map(String::as_str).collect();
    assert_eq!(
        tensor::to_bytes(&got[1], DataType::Bytes).unwrap(),
        binary(&upper)
    );
}

/// TorchScript as a model server's instance runs it: `worker.py` in the framework Python's
/// interpreter inside this process (no process beside it), with the worker's answers and
/// errors, from several threads at once.
#[test]
fn torchscript_runs_in_the_interpreter_inside_the_process() {
    let embedded = Worker::embedded(Some(2), 2).unwrap();
    assert_eq!(embedded.pid(), None);
    assert!(embedded.is_alive());
    let inputs = [x_spec(), spec("idx", DataType::Int64, &[-1])];
    let two = (embedded.load_torchscript("two", &path("two.pt"), &inputs)).unwrap();
    assert_eq!(
        two,
        worker()
            .load_torchscript("two", &path("two.pt"), &inputs)
            .unwrap()
    );
    let model = Arc::new(Model::in_framework(
        embedded.clone(),
        "two",
        Format::TorchScript,
        &two,
    ));
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let model = model.clone();
            std::thread::spawn(move || {
                for _ in 0..20 {
                    let given = vec![
                        ("x".into(), Input::from(x())),
                        ("idx".into(), Input::from(idx())),
                    ];
                    let got = model.run(given).unwrap();
                    assert_close(&got[0], &expected("two", Some(0)));
                    assert_close(&got[1], &expected("two", Some(1)));
                }
            })
        })
        .collect();
    callers.into_iter().for_each(|c| c.join().unwrap());
    // What does not load says why, as from the worker process.
    let wrong = [spec("y", DataType::Fp32, &[-1, 3])];
    let err = embedded
        .load_torchscript("bad", &path("linear.pt"), &wrong)
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::Unreadable(m) if m.contains("not forward's arguments")),
        "{err}"
    );
}
