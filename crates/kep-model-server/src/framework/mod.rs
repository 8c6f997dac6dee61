//! Models as their frameworks save them, run by the framework itself: a TensorFlow
//! SavedModel on TensorFlow's runtime, a TorchScript file on libtorch. kep builds and runs
//! without either framework installed. A model server's instance runs a SavedModel through
//! TensorFlow's C API ([`tensorflow`]) and TorchScript in the framework's own Python, its
//! interpreter inside the process ([`embedded`]: libtorch has no C API); `kep serve`'s
//! upload checks, and an instance whose Python has no shared `libpython`, use a worker
//! process in that Python instead (as Triton's Python backend does). Both run `worker.py`.

mod embedded;
mod protocol;
pub use embedded::{Interpreter, Job};
pub mod tensorflow;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tract_onnx::prelude::Tensor;

use crate::model::{ModelError, TensorSpec};
use protocol::{Reply, WireError};

/// The variable that names the Python of `kep model-server`'s workers.
pub const PYTHON_ENV: &str = "KEP_FRAMEWORK_PYTHON";
/// The worker's framework threads, which it sets as it imports the framework.
const THREADS_ENV: &str = "KEP_FRAMEWORK_THREADS";

static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Sets the Python this process's workers run in (`serving.framework_python`), before
/// any starts.
pub fn use_python(python: PathBuf) {
    let _ = PYTHON.set(python);
}

/// The Python kep runs framework models with: the one [`use_python`] set, else
/// `KEP_FRAMEWORK_PYTHON`, else `python3` on the PATH.
pub fn python() -> PathBuf {
    PYTHON.get().cloned().unwrap_or_else(|| {
        std::env::var_os(PYTHON_ENV).map_or_else(|| PathBuf::from("python3"), PathBuf::from)
    })
}

const SCRIPT: &str = include_str!("worker.py");

/// One signature of a loaded model (a SavedModel's SignatureDef; a TorchScript module's
/// `forward`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignatureDef {
    pub name: String,
    pub method: Option<String>,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
}

/// `worker.py` running framework models, in a Python process of its own or in this one;
/// calls from many threads at once.
pub struct Worker {
    python: PathBuf,
    next_id: AtomicU64,
    way: Way,
}

enum Way {
    /// A child process, spoken to over its stdin and stdout.
    Process {
        pid: u32,
        stdin: Mutex<ChildStdin>,
        shared: Arc<Shared>,
    },
    /// The interpreter inside this process.
    Embedded(&'static embedded::Interpreter),
}

/// What the worker and its reader thread share.
struct Shared {
    child: Mutex<Child>,
    calls: Mutex<Calls>,
}

type Answer = (Reply, Vec<u8>);

#[derive(Default)]
struct Calls {
    waiting: HashMap<u64, Sender<Answer>>,
    /// Why the worker is gone, once its answers ended.
    exited: Option<String>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A thread that panicked holding one of these left it whole: each update is one step.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Worker {
    /// Starts the worker in [`python()`].
    pub fn start() -> Result<Arc<Worker>, ModelError> {
        Worker::spawn(&python(), None)
    }

    /// Starts the worker in [`python()`], its framework's compute on at most `threads`
    /// threads (an instance's CPUs, as a container would give it).
    pub fn start_threads(threads: Option<usize>) -> Result<Arc<Worker>, ModelError> {
        Worker::spawn(&python(), threads)
    }

    /// The worker inside this process, in [`python()`]'s interpreter, its framework's
    /// compute on at most `threads` threads, `instances` calls at once (the first
    /// worker's: one interpreter serves the process). `Err` says why it cannot run there.
    pub fn embedded(threads: Option<usize>, instances: usize) -> Result<Arc<Worker>, String> {
        let python = python();
        let interpreter = embedded::interpreter(&python, threads, instances)?;
        Ok(Arc::new(Worker {
            python,
            next_id: AtomicU64::new(1),
            way: Way::Embedded(interpreter),
        }))
    }

    /// Starts the worker in `python`; it imports no framework until a model needs one.
    pub fn start_with(python: &Path) -> Result<Arc<Worker>, ModelError> {
        Worker::spawn(python, None)
    }

    fn spawn(python: &Path, threads: Option<usize>) -> Result<Arc<Worker>, ModelError> {
        let unavailable = |why: String| {
            ModelError::EngineUnavailable(format!(
                "{} cannot run kep's framework worker ({why}): SavedModels need a Python 3 \
                 with tensorflow-cpu, TorchScript one with torch (set {PYTHON_ENV})",
                python.display()
            ))
        };
        let mut command = Command::new(python);
        if let Some(threads) = threads {
            command.env(THREADS_ENV, threads.to_string());
        }
        let mut child = command
            .args(["-u", "-c", SCRIPT])
            // TensorFlow's C++ INFO logs, on every import and load, are noise in the log.
            .env("TF_CPP_MIN_LOG_LEVEL", "2")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| unavailable(e.to_string()))?;
        let (Some(stdin), Some(mut stdout)) = (child.stdin.take(), child.stdout.take()) else {
            unreachable!("both are piped");
        };
        // Its first frame says it runs: a Python that cannot run the script ends instead.
        if let Err(e) = protocol::read(&mut stdout) {
            let _ = child.kill();
            let status = child
                .wait()
                .map_or_else(|e| e.to_string(), |s| s.to_string());
            return Err(unavailable(format!("{e}; {status}")));
        }
        let shared = Arc::new(Shared {
            child: Mutex::new(child),
            calls: Mutex::default(),
        });
        let reader = shared.clone();
        let pid = lock(&shared.child).id();
        std::thread::Builder::new()
            .name("framework-worker".into())
            .spawn(move || reader.read_answers(stdout))
            .map_err(|e| unavailable(e.to_string()))?;
        Ok(Arc::new(Worker {
            python: python.to_owned(),
            next_id: AtomicU64::new(1),
            way: Way::Process {
                pid,
                stdin: Mutex::new(stdin),
                shared,
            },
        }))
    }

    /// The interpreter inside this process the worker runs in, whose threads its calls
    /// are best made on; `None` for a worker process.
    pub fn interpreter(&self) -> Option<&'static Interpreter> {
        match &self.way {
            Way::Process { .. } => None,
            Way::Embedded(interpreter) => Some(interpreter),
        }
    }

    /// The worker process's id; `None` inside this process.
    pub fn pid(&self) -> Option<u32> {
        match &self.way {
            Way::Process { pid, .. } => Some(*pid),
            Way::Embedded(_) => None,
        }
    }

    pub fn is_alive(&self) -> bool {
        match &self.way {
            Way::Process { shared, .. } => {
                lock(&shared.calls).exited.is_none()
                    && matches!(lock(&shared.child).try_wait(), Ok(None))
            }
            Way::Embedded(_) => true,
        }
    }

    /// Loads the SavedModel directory `dir` (the one holding saved_model.pb) under `key`
    /// with `tf.saved_model.load`; returns its signatures as TensorFlow reads them,
    /// `serving_default` first, others by name. Input and output names are the signature's
    /// keys, not graph tensor names; `method` is the SignatureDef's method_name where the
    /// SavedModel records one.
    pub fn load_saved_model(&self, key: &str, dir: &Path) -> Result<Vec<SignatureDef>, ModelError> {
        let (reply, _) = self.call(
            json!({"op": "load_saved_model", "key": key, "path": dir}),
            &[],
        )?;
        serde_json::from_value(reply.result).map_err(|e| ModelError::Failed(e.to_string()))
    }

    /// Loads the TorchScript file under `key` with `torch.jit.load(map_location="cpu")`.
    /// `inputs` are declared (TorchScript records no types or shapes): their names are
    /// `forward`'s arguments, in order. The outputs are learnt from two runs on zeros (each
    /// -1 dimension as 1, then as 2): `OUTPUT__0`, `OUTPUT__1`… for a tensor or a tuple or
    /// list of them, a dict's keys; a dimension that differs between the runs is -1.
    pub fn load_torchscript(
        &self,
        key: &str,
        file: &Path,
        inputs: &[TensorSpec],
    ) -> Result<SignatureDef, ModelError> {
        let (reply, _) = self.call(
            json!({"op": "load_torchscript", "key": key, "path": file, "inputs": inputs}),
            &[],
        )?;
        let [forward]: [SignatureDef; 1] =
            serde_json::from_value(reply.result).map_err(|e| ModelError::Failed(e.to_string()))?;
        Ok(forward)
    }

    /// Runs `signature` of the model loaded under `key`; returns the outputs named, in
    /// that order.
    pub fn run(
        &self,
        key: &str,
        signature: &str,
        inputs: Vec<(String, Tensor)>,
        outputs: &[String],
    ) -> Result<Vec<Tensor>, ModelError> {
        let (reply, data) = self.call(
            json!({"op": "run", "key": key, "signature": signature, "outputs": outputs}),
            &inputs,
        )?;
        if reply.tensors.len() != outputs.len() {
            return Err(ModelError::Failed(format!(
                "the framework worker answered {} outputs for {}",
                reply.tensors.len(),
                outputs.len()
            )));
        }
        protocol::tensors(&reply, &data).map_err(ModelError::Failed)
    }

    /// Sends one request and waits for its answer, whatever other threads are waiting for.
    fn call(&self, header: Value, tensors: &[(String, Tensor)]) -> Result<Answer, ModelError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = protocol::request(id, header, tensors).map_err(ModelError::Failed)?;
        let (reply, data) = match &self.way {
            Way::Process { stdin, shared, .. } => shared.call(id, stdin, &frame)?,
            Way::Embedded(interpreter) => {
                let answer = interpreter.call(frame).map_err(ModelError::Failed)?;
                protocol::read(&mut answer.as_slice()).map_err(ModelError::Failed)?
            }
        };
        match reply.error {
            None => Ok((reply, data)),
            Some(WireError::Unavailable { framework, package }) => {
                Err(ModelError::EngineUnavailable(format!(
                    "{framework}'s runtime is not installed for {}: pip install {package}",
                    self.python.display()
                )))
            }
            Some(WireError::Unreadable { message }) => Err(ModelError::Unreadable(message)),
            Some(WireError::Failed { message }) => Err(ModelError::Failed(message)),
        }
    }
}

impl Shared {
    /// Writes the request `id`'s frame to the worker and waits for its answer, whatever
    /// other threads are waiting for.
    fn call(&self, id: u64, stdin: &Mutex<ChildStdin>, frame: &[u8]) -> Result<Answer, ModelError> {
        let (tx, rx) = channel();
        {
            let mut calls = lock(&self.calls);
            if let Some(exited) = &calls.exited {
                return Err(ModelError::Failed(exited.clone()));
            }
            calls.waiting.insert(id, tx);
        }
        if let Err(e) = protocol::write(&mut *lock(stdin), frame) {
            lock(&self.calls).waiting.remove(&id);
            return Err(ModelError::Failed(format!(
                "the framework worker exited: its stdin is closed ({e})"
            )));
        }
        // The reader drops every sender when the worker's answers end.
        rx.recv().map_err(|_| {
            let calls = lock(&self.calls);
            ModelError::Failed(calls.exited.clone().unwrap_or_default())
        })
    }

    /// The reader thread: hands each answer to the call waiting for it until the worker's
    /// stdout ends, then fails every call still waiting and any made later.
    fn read_answers(&self, mut stdout: std::process::ChildStdout) {
        let why = loop {
            match protocol::read(&mut stdout) {
                Ok(answer) => {
                    if let Some(tx) = lock(&self.calls).waiting.remove(&answer.0.id) {
                        let _ = tx.send(answer);
                    }
                }
                Err(e) => break e,
            }
        };
        let exited = format!("the framework worker exited ({})", self.status(&why));
        let mut calls = lock(&self.calls);
        // Stopped by its `Worker`'s drop, it is no news.
        if calls.exited.is_none() {
            tracing::error!("{exited}");
            calls.exited = Some(exited);
        }
        calls.waiting.clear();
    }

    /// How the process ended, once it has: its stdout may close a moment before it exits.
    fn status(&self, why: &str) -> String {
        for _ in 0..100 {
            match lock(&self.child).try_wait() {
                Ok(Some(status)) => return status.to_string(),
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return e.to_string(),
            }
        }
        // Alive with its answers unreadable: it cannot be spoken to any more.
        let _ = lock(&self.child).kill();
        format!("killed: its answers could not be read: {why}")
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // The interpreter inside this process lives as long as the process.
        let Way::Process { shared, .. } = &self.way else {
            return;
        };
        lock(&shared.calls).exited = Some("the framework worker was stopped".into());
        let mut child = lock(&shared.child);
        let _ = child.kill();
        let _ = child.wait();
    }
}
