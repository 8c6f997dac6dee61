//! The optional engine: ONNX Runtime through `ort`, loaded at run time from a
//! `libonnxruntime` the user already has. Nothing is downloaded or linked at build time.
//! A process given GPUs runs its model on ONNX Runtime's CUDA execution provider, where the
//! library has one (`onnxruntime-gpu`'s), else on the CPU.

use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};

use ort::environment::Environment;
use ort::ep::{CUDA, ExecutionProvider as _};
use ort::session::builder::SessionBuilder;
use ort::session::{Session, SessionInputValue};
use ort::value::{
    DynValue, Outlet, PrimitiveTensorElementType, Tensor as OrtTensor, TensorElementType,
    TensorRef, ValueType,
};
use tract_onnx::prelude::tract_ndarray::{ArrayD, IxDyn};
use tract_onnx::prelude::{Datum, DatumType, Tensor};
use tract_onnx::tract_core::tract_data::half::f16;

use crate::model::{DataType, Input, ModelError, Signature, TensorInPlace, TensorSpec};

/// The library a process loads, fixed by its first use (ONNX Runtime allows one per
/// process).
static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
static ENVIRONMENT: OnceLock<Result<Environment, String>> = OnceLock::new();
static INTRA_THREADS: OnceLock<usize> = OnceLock::new();
static GPUS: OnceLock<usize> = OnceLock::new();
static SESSIONS: OnceLock<usize> = OnceLock::new();
static SPIN: OnceLock<bool> = OnceLock::new();

/// How many GPUs the process was given (`CUDA_VISIBLE_DEVICES`), before the first model is
/// loaded; with one or more, models run on the first.
pub fn use_gpus(gpus: usize) {
    let _ = GPUS.set(gpus);
}

/// Threads one inference may use (ONNX Runtime's intra-op threads), before the first model
/// is loaded; unset, one per core. An instance is given its instance type's CPUs.
pub fn use_intra_threads(threads: usize) {
    let _ = INTRA_THREADS.set(threads);
}

/// Sessions of each model (Triton's model instances, `instance_group` `count`), before the
/// first model is loaded; unset, one. Calls run on as many sessions at once, each with its
/// share of the intra-op threads: on a GPU, their kernels overlap.
pub fn use_sessions(sessions: usize) {
    let _ = SESSIONS.set(sessions.max(1));
}

/// Whether a session's idle threads spin for the next work (ONNX Runtime's default), before
/// the first model is loaded. Calls one after the other gain from it; a dynamic batcher's
/// runs come in bursts, and threads spinning between them take the cores its callers' HTTP
/// work needs (bench/batching.sh: 1.29× the calls/s without it, BENCHMARKS.md).
pub fn use_spinning(spin: bool) {
    let _ = SPIN.set(spin);
}

/// Names the `libonnxruntime` to load, before the first model is; otherwise it is found as
/// [`library`] says. A later call does not change a library already chosen.
pub fn use_library(path: PathBuf) {
    let _ = LIBRARY.set(path);
}

/// The library to load: the one named by [`use_library`], else `ORT_DYLIB_PATH`, else the
/// one inside the `onnxruntime` Python package that `python3` imports.
pub fn library() -> Result<PathBuf, String> {
    if let Some(path) = LIBRARY.get() {
        return Ok(path.clone());
    }
    if let Some(path) = std::env::var_os("ORT_DYLIB_PATH").filter(|p| !p.is_empty()) {
        return Ok(path.into());
    }
    const NOT_FOUND: &str = "no libonnxruntime found: set serving.onnxruntime (ORT_DYLIB_PATH \
                             for `kep model-server`) or install the onnxruntime Python package";
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import onnxruntime, os; print(os.path.dirname(onnxruntime.__file__))",
        ])
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|_| NOT_FOUND.to_owned())?;
    if !out.status.success() {
        return Err(NOT_FOUND.into());
    }
    let capi = Path::new(String::from_utf8_lossy(&out.stdout).trim()).join("capi");
    std::fs::read_dir(&capi)
        .map_err(|_| NOT_FOUND.to_owned())?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libonnxruntime.so") || n == "libonnxruntime.dylib")
        })
        .ok_or_else(|| NOT_FOUND.to_owned())
}

fn environment() -> Result<&'static Environment, ModelError> {
    ENVIRONMENT
        .get_or_init(|| {
            let lib = library()?;
            let chosen = LIBRARY.get_or_init(|| lib.clone());
            ort::init_from(chosen)
                .map_err(|e| format!("{}: {e}", chosen.display()))?
                .with_name("kep")
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| ModelError::EngineUnavailable(format!("ONNX Runtime: {e}")))
}

/// A model in ONNX Runtime sessions ([`use_sessions`]). `Session::run` takes `&mut`, so a
/// call takes a session that no other call runs on, waiting for one when all are taken.
pub struct OrtModel {
    idle: Mutex<Vec<Session>>,
    returned: Condvar,
}

/// Loads `path` into its sessions: what ONNX Runtime cannot run fails here.
pub fn load(path: &Path) -> Result<(Signature, OrtModel), ModelError> {
    let sessions = SESSIONS.get().copied().unwrap_or(1);
    let loaded = (0..sessions)
        .map(|_| session(path, sessions))
        .collect::<Result<Vec<_>, _>>()?;
    let specs = |outlets: &[Outlet]| outlets.iter().map(spec).collect::<Result<Vec<_>, _>>();
    let signature = (specs(loaded[0].inputs())?, specs(loaded[0].outputs())?);
    Ok((
        signature,
        OrtModel {
            idle: Mutex::new(loaded),
            returned: Condvar::new(),
        },
    ))
}

/// One of `sessions` sessions of the model, with its share of the intra-op threads.
fn session(path: &Path, sessions: usize) -> Result<Session, ModelError> {
    let unsupported = |e: String| ModelError::Unsupported(e);
    let mut builder = Session::builder(environment()?).map_err(|e| unsupported(e.to_string()))?;
    if let Some(&threads) = INTRA_THREADS.get() {
        builder = builder
            .with_intra_threads(threads.div_ceil(sessions).max(1))
            .map_err(|e| unsupported(e.to_string()))?;
    }
    if SPIN.get() == Some(&false) {
        builder = builder
            .with_intra_op_spinning(false)
            .map_err(|e| unsupported(e.to_string()))?
            .with_inter_op_spinning(false)
            .map_err(|e| unsupported(e.to_string()))?;
    }
    if GPUS.get().is_some_and(|&n| n > 0) {
        builder = on_gpu(builder);
    }
    builder
        .commit_from_file(path)
        .map_err(|e| unsupported(e.to_string()))
}

/// The session on the CUDA execution provider where the library has it and it registers;
/// otherwise as it was, on the CPU, with a warning saying why.
fn on_gpu(mut builder: SessionBuilder) -> SessionBuilder {
    let library = LIBRARY
        .get()
        .map(|l| l.display().to_string())
        .unwrap_or_default();
    match CUDA::is_available() {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(
                %library,
                "this libonnxruntime has no CUDA execution provider (onnxruntime-gpu has one): \
                 the model runs on the CPU"
            );
            return builder;
        }
        Err(e) => {
            tracing::warn!(%library, error = %e, "asking ONNX Runtime for its providers: the model runs on the CPU");
            return builder;
        }
    }
    // Device 0 is the first GPU kep gave this process.
    match CUDA::default().with_device_id(0).register(&mut builder) {
        Ok(()) => tracing::info!("the model runs on ONNX Runtime's CUDA execution provider"),
        // Most often CUDA or cuDNN libraries it could not load.
        Err(e) => {
            tracing::warn!(error = %e, "the CUDA execution provider did not start: the model runs on the CPU")
        }
    }
    builder
}

fn spec(outlet: &Outlet) -> Result<TensorSpec, ModelError> {
    let name = outlet.name();
    match outlet.dtype() {
        ValueType::Tensor { ty, shape, .. } => Ok(TensorSpec {
            name: name.to_owned(),
            datatype: data_type(*ty)
                .ok_or_else(|| ModelError::Unsupported(format!("{name}: element type {ty:?}")))?,
            shape: shape.to_vec(),
        }),
        other => Err(ModelError::Unsupported(format!(
            "{name}: {other:?} is not a tensor"
        ))),
    }
}

fn data_type(t: TensorElementType) -> Option<DataType> {
    Some(match t {
        TensorElementType::Bool => DataType::Bool,
        TensorElementType::Uint8 => DataType::Uint8,
        TensorElementType::Uint16 => DataType::Uint16,
        TensorElementType::Uint32 => DataType::Uint32,
        TensorElementType::Uint64 => DataType::Uint64,
        TensorElementType::Int8 => DataType::Int8,
        TensorElementType::Int16 => DataType::Int16,
        TensorElementType::Int32 => DataType::Int32,
        TensorElementType::Int64 => DataType::Int64,
        TensorElementType::Float16 => DataType::Fp16,
        TensorElementType::Float32 => DataType::Fp32,
        TensorElementType::Float64 => DataType::Fp64,
        TensorElementType::String => DataType::Bytes,
        _ => return None,
    })
}

impl OrtModel {
    /// Runs checked inputs, named; returns the outputs `wanted`, in their order.
    pub fn run(
        &self,
        inputs: Vec<(&str, Input)>,
        wanted: &[TensorSpec],
    ) -> Result<Vec<Tensor>, ModelError> {
        let failed = |e: String| ModelError::Failed(e);
        let values = inputs
            .iter()
            .map(|(name, t)| Ok((*name, to_ort(t).map_err(failed)?)))
            .collect::<Result<Vec<(&str, SessionInputValue<'_>)>, ModelError>>()?;
        let mut taken = self.take();
        let outputs = taken
            .session
            .as_mut()
            .expect("a taken session is there until dropped")
            .run(values)
            .map_err(|e| ModelError::Failed(e.to_string()))?;
        wanted
            .iter()
            .map(|spec| {
                let value = outputs.get(&spec.name).ok_or_else(|| {
                    ModelError::Failed(format!("ONNX Runtime gave no output {}", spec.name))
                })?;
                from_ort(value).map_err(failed)
            })
            .collect()
    }

    /// An idle session, once there is one.
    fn take(&self) -> Taken<'_> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(session) = idle.pop() {
                return Taken {
                    model: self,
                    session: Some(session),
                };
            }
            idle = self
                .returned
                .wait(idle)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// A session one call runs on, given back when dropped, whatever the call's outcome.
struct Taken<'a> {
    model: &'a OrtModel,
    session: Option<Session>,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let model = self.model;
            model
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(session);
            model.returned.notify_one();
        }
    }
}

/// The input's memory as ONNX Runtime's input, not a copy of it, whether decoded or where
/// the request left it: a batch of images is megabytes, copied once more to the GPU anyway.
fn to_ort(input: &Input) -> Result<SessionInputValue<'_>, String> {
    match input {
        Input::Tensor(t) => tensor_to_ort(t),
        Input::InPlace(t) => in_place_to_ort(t),
    }
}

/// A tensor in place: `tensor::in_place` left only fixed-size numbers there, with their
/// bytes aligned for their elements.
fn in_place_to_ort(t: &TensorInPlace) -> Result<SessionInputValue<'_>, String> {
    fn cast<T: bytemuck::Pod + PrimitiveTensorElementType + std::fmt::Debug>(
        t: &TensorInPlace,
    ) -> Result<SessionInputValue<'_>, String> {
        let data: &[T] = bytemuck::try_cast_slice(t.place.bytes()).map_err(|e| e.to_string())?;
        let shape: Vec<i64> = t.shape.iter().map(|&d| d as i64).collect();
        TensorRef::from_array_view((shape, data))
            .map(Into::into)
            .map_err(|e| e.to_string())
    }
    match t.datatype {
        DataType::Uint8 => cast::<u8>(t),
        DataType::Uint16 => cast::<u16>(t),
        DataType::Uint32 => cast::<u32>(t),
        DataType::Uint64 => cast::<u64>(t),
        DataType::Int8 => cast::<i8>(t),
        DataType::Int16 => cast::<i16>(t),
        DataType::Int32 => cast::<i32>(t),
        DataType::Int64 => cast::<i64>(t),
        DataType::Fp32 => cast::<f32>(t),
        DataType::Fp64 => cast::<f64>(t),
        other => Err(format!("no {} tensor is read in place", other.name())),
    }
}

fn tensor_to_ort(t: &Tensor) -> Result<SessionInputValue<'_>, String> {
    fn plain<T: Datum + PrimitiveTensorElementType + std::fmt::Debug>(
        t: &Tensor,
        shape: Vec<i64>,
    ) -> Result<SessionInputValue<'_>, String> {
        let data = t
            .try_as_plain_ram()
            .and_then(|plain| plain.as_slice::<T>())
            .map_err(|e| format!("{e:#}"))?;
        TensorRef::from_array_view((shape, data))
            .map(Into::into)
            .map_err(|e| e.to_string())
    }
    let shape: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
    match t.datum_type() {
        DatumType::Bool => plain::<bool>(t, shape),
        DatumType::U8 => plain::<u8>(t, shape),
        DatumType::U16 => plain::<u16>(t, shape),
        DatumType::U32 => plain::<u32>(t, shape),
        DatumType::U64 => plain::<u64>(t, shape),
        DatumType::I8 => plain::<i8>(t, shape),
        DatumType::I16 => plain::<i16>(t, shape),
        DatumType::I32 => plain::<i32>(t, shape),
        DatumType::I64 => plain::<i64>(t, shape),
        DatumType::F16 => plain::<f16>(t, shape),
        DatumType::F32 => plain::<f32>(t, shape),
        DatumType::F64 => plain::<f64>(t, shape),
        DatumType::String => {
            let data = elements::<String>(t)?;
            OrtTensor::from_string_array((shape, &data[..]))
                .map(Into::into)
                .map_err(|e| e.to_string())
        }
        other => Err(format!("no ONNX Runtime tensor of {other:?}")),
    }
}

fn elements<T: Datum + Clone>(t: &Tensor) -> Result<Vec<T>, String> {
    let view = t.to_plain_array_view::<T>().map_err(|e| format!("{e:#}"))?;
    Ok(view
        .as_slice()
        .map_or_else(|| view.iter().cloned().collect(), <[T]>::to_vec))
}

fn from_ort(v: &DynValue) -> Result<Tensor, String> {
    fn array<T: Datum>(shape: &[i64], data: Vec<T>) -> Result<Tensor, String> {
        let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        ArrayD::from_shape_vec(IxDyn(&shape), data)
            .map(Tensor::from)
            .map_err(|e| e.to_string())
    }
    fn plain<T: Datum + PrimitiveTensorElementType + Clone>(
        v: &DynValue,
    ) -> Result<Tensor, String> {
        let (shape, data) = v.try_extract_tensor::<T>().map_err(|e| e.to_string())?;
        array(shape, data.to_vec())
    }
    let ValueType::Tensor { ty, .. } = v.dtype() else {
        return Err(format!("an output of {:?} is not a tensor", v.dtype()));
    };
    match ty {
        TensorElementType::Bool => plain::<bool>(v),
        TensorElementType::Uint8 => plain::<u8>(v),
        TensorElementType::Uint16 => plain::<u16>(v),
        TensorElementType::Uint32 => plain::<u32>(v),
        TensorElementType::Uint64 => plain::<u64>(v),
        TensorElementType::Int8 => plain::<i8>(v),
        TensorElementType::Int16 => plain::<i16>(v),
        TensorElementType::Int32 => plain::<i32>(v),
        TensorElementType::Int64 => plain::<i64>(v),
        TensorElementType::Float16 => plain::<f16>(v),
        TensorElementType::Float32 => plain::<f32>(v),
        TensorElementType::Float64 => plain::<f64>(v),
        TensorElementType::String => {
            let (shape, data) = v.try_extract_strings().map_err(|e| e.to_string())?;
            array(shape, data)
        }
        other => Err(format!("no protocol datatype for {other:?}")),
    }
}
