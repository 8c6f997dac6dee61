//! What the model server's test files share: the models `make_models.py` makes, Python
//! run as the tests' peer, and a real server on port 0.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use kep_model_server::{Engine, Model, Protocol, Served, router};

pub fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

pub fn python(args: &[&str]) -> String {
    let out = Command::new("python3").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "python3 {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The models `make_models.py` makes, in a folder of their own.
pub fn made_models() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let script = tests_dir().join("make_models.py");
    python(&[script.to_str().unwrap(), dir.path().to_str().unwrap()]);
    dir
}

/// The engines this build has: answers must match ONNX Runtime's whichever runs the model.
pub const ENGINES: &[Engine] = &[
    Engine::Tract,
    #[cfg(feature = "onnxruntime")]
    Engine::OnnxRuntime,
];

pub async fn serve(protocol: Protocol, engine: Engine, name: &str, path: &Path) -> String {
    listen(
        protocol,
        Served::of_file(name, Model::load(path, engine).unwrap()),
    )
    .await
}

/// A real server of `served` on port 0; its URL.
pub async fn listen(protocol: Protocol, served: Served) -> String {
    let served = Arc::new(served);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router(protocol, served, None)).await });
    url
}
