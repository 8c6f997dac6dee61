//! A SavedModel run in this process by TensorFlow's C API, as TF Serving runs one: the
//! MetaGraph tagged `serve` loaded into a session, each call a `TF_SessionRun` of its
//! SignatureDef's tensors. The library is the `tensorflow` wheel's own
//! (`libtensorflow_cc.so.2`), opened at run time: kep links nothing of TensorFlow's and builds
//! without it. Against the worker process this saves a pipe round trip and two hand-overs
//! between threads on every call (BENCHMARKS.md, issue #46).
#![expect(
    unsafe_code,
    reason = "a C library reached through its functions' pointers; each use says SAFETY"
)]

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tract_onnx::prelude::Tensor;

use crate::model::{DataType, ModelError};
use crate::tfserving::grpc::tensor::dtype;

// The C API's opaque types.
enum TfStatus {}
enum TfGraph {}
enum TfSessionOptions {}
enum TfSession {}
enum TfOperation {}
enum TfTensor {}
enum TfBuffer {}

#[repr(C)]
#[derive(Clone, Copy)]
struct TfOutput {
    oper: *mut TfOperation,
    index: c_int,
}

/// `TF_STRING`'s element, `TF_TString` (`tsl/platform/ctstring_internal.h`): 24 bytes whose
/// first byte's low two bits say how the rest reads.
const TSTRING_SIZE: usize = 24;
const DT_STRING: c_int = 7;

/// The functions of `c_api.h` kep calls.
struct Api {
    new_status: unsafe extern "C" fn() -> *mut TfStatus,
    delete_status: unsafe extern "C" fn(*mut TfStatus),
    get_code: unsafe extern "C" fn(*const TfStatus) -> c_int,
    message: unsafe extern "C" fn(*const TfStatus) -> *const c_char,
    new_graph: unsafe extern "C" fn() -> *mut TfGraph,
    delete_graph: unsafe extern "C" fn(*mut TfGraph),
    new_session_options: unsafe extern "C" fn() -> *mut TfSessionOptions,
    delete_session_options: unsafe extern "C" fn(*mut TfSessionOptions),
    set_config: unsafe extern "C" fn(*mut TfSessionOptions, *const c_void, usize, *mut TfStatus),
    load_session_from_saved_model: unsafe extern "C" fn(
        *const TfSessionOptions,
        *const TfBuffer,
        *const c_char,
        *const *const c_char,
        c_int,
        *mut TfGraph,
        *mut TfBuffer,
        *mut TfStatus,
    ) -> *mut TfSession,
    close_session: unsafe extern "C" fn(*mut TfSession, *mut TfStatus),
    delete_session: unsafe extern "C" fn(*mut TfSession, *mut TfStatus),
    graph_operation_by_name: unsafe extern "C" fn(*mut TfGraph, *const c_char) -> *mut TfOperation,
    operation_num_outputs: unsafe extern "C" fn(*mut TfOperation) -> c_int,
    session_run: unsafe extern "C" fn(
        *mut TfSession,
        *const TfBuffer,
        *const TfOutput,
        *const *mut TfTensor,
        c_int,
        *const TfOutput,
        *mut *mut TfTensor,
        c_int,
        *const *const TfOperation,
        c_int,
        *mut TfBuffer,
        *mut TfStatus,
    ),
    allocate_tensor: unsafe extern "C" fn(c_int, *const i64, c_int, usize) -> *mut TfTensor,
    delete_tensor: unsafe extern "C" fn(*mut TfTensor),
    tensor_type: unsafe extern "C" fn(*const TfTensor) -> c_int,
    num_dims: unsafe extern "C" fn(*const TfTensor) -> c_int,
    dim: unsafe extern "C" fn(*const TfTensor, c_int) -> i64,
    tensor_byte_size: unsafe extern "C" fn(*const TfTensor) -> usize,
    tensor_data: unsafe extern "C" fn(*const TfTensor) -> *mut c_void,
    /// Kept open for as long as the process runs: the functions above are theirs.
    _libraries: [libloading::Library; 2],
}

static API: OnceLock<Result<Api, String>> = OnceLock::new();

/// The C API, opened on first use from the `tensorflow` package of [`super::python()`].
fn api() -> Result<&'static Api, ModelError> {
    API.get_or_init(|| library_dir().and_then(|dir| Api::open(&dir)))
        .as_ref()
        .map_err(|e| ModelError::EngineUnavailable(e.clone()))
}

/// Where the `tensorflow` package of the framework Python is, found without importing it.
fn library_dir() -> Result<PathBuf, String> {
    let python = super::python();
    let find = "import importlib.util as u; s = u.find_spec('tensorflow'); \
                print(s.submodule_search_locations[0] if s else '')";
    let out = std::process::Command::new(&python)
        .args(["-c", find])
        .output()
        .map_err(|e| format!("{} cannot run: {e}", python.display()))?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || dir.is_empty() {
        return Err(format!(
            "TensorFlow's runtime is not installed for {}: pip install tensorflow-cpu",
            python.display()
        ));
    }
    Ok(PathBuf::from(dir))
}

impl Api {
    fn open(dir: &Path) -> Result<Api, String> {
        let open = |name: &str| {
            // SAFETY: TensorFlow's libraries run no initialiser that conflicts with this
            // process; they are opened RTLD_LOCAL, so their symbols shadow none of ours.
            unsafe { libloading::Library::new(dir.join(name)) }
                .map_err(|e| format!("TensorFlow's C API cannot be opened: {e}"))
        };
        let cc = open("libtensorflow_cc.so.2")?;
        let framework = open("libtensorflow_framework.so.2")?;
        macro_rules! find {
            ($name:literal) => {{
                let symbol = concat!($name, "\0").as_bytes();
                // SAFETY: each type above is the function's in `c_api.h`.
                unsafe {
                    match cc.get(symbol) {
                        Ok(f) => *f,
                        Err(_) => *framework
                            .get(symbol)
                            .map_err(|e| format!("{}: {e}", $name))?,
                    }
                }
            }};
        }
        Ok(Api {
            new_status: find!("TF_NewStatus"),
            delete_status: find!("TF_DeleteStatus"),
            get_code: find!("TF_GetCode"),
            message: find!("TF_Message"),
            new_graph: find!("TF_NewGraph"),
            delete_graph: find!("TF_DeleteGraph"),
            new_session_options: find!("TF_NewSessionOptions"),
            delete_session_options: find!("TF_DeleteSessionOptions"),
            set_config: find!("TF_SetConfig"),
            load_session_from_saved_model: find!("TF_LoadSessionFromSavedModel"),
            close_session: find!("TF_CloseSession"),
            delete_session: find!("TF_DeleteSession"),
            graph_operation_by_name: find!("TF_GraphOperationByName"),
            operation_num_outputs: find!("TF_OperationNumOutputs"),
            session_run: find!("TF_SessionRun"),
            allocate_tensor: find!("TF_AllocateTensor"),
            delete_tensor: find!("TF_DeleteTensor"),
            tensor_type: find!("TF_TensorType"),
            num_dims: find!("TF_NumDims"),
            dim: find!("TF_Dim"),
            tensor_byte_size: find!("TF_TensorByteSize"),
            tensor_data: find!("TF_TensorData"),
            _libraries: [cc, framework],
        })
    }
}

/// A `TF_Status`, deleted when dropped.
struct Status<'a>(&'a Api, *mut TfStatus);

impl<'a> Status<'a> {
    fn new(api: &'a Api) -> Self {
        // SAFETY: no arguments; the status is deleted by drop.
        Status(api, unsafe { (api.new_status)() })
    }

    /// `Err` with TensorFlow's message where the last call failed.
    fn check(&self) -> Result<(), String> {
        // SAFETY: the status is live; its message is a C string it owns.
        unsafe {
            if (self.0.get_code)(self.1) == 0 {
                return Ok(());
            }
            Err(CStr::from_ptr((self.0.message)(self.1))
                .to_string_lossy()
                .into_owned())
        }
    }
}

impl Drop for Status<'_> {
    fn drop(&mut self) {
        // SAFETY: made by TF_NewStatus, deleted once.
        unsafe { (self.0.delete_status)(self.1) }
    }
}

/// A `TF_Tensor`, deleted when dropped.
struct Owned<'a>(&'a Api, *mut TfTensor);

impl Drop for Owned<'_> {
    fn drop(&mut self) {
        // SAFETY: a tensor this process owns, deleted once.
        unsafe { (self.0.delete_tensor)(self.1) }
    }
}

/// One SavedModel version loaded in a session; calls run on it from many threads at once
/// (`TF_SessionRun` is thread-safe).
pub struct Session {
    api: &'static Api,
    graph: *mut TfGraph,
    session: *mut TfSession,
}

// SAFETY: TensorFlow's sessions and graphs are safe to use from several threads; nothing
// here mutates the graph after loading.
unsafe impl Send for Session {}
unsafe impl Sync for Session {}

impl Session {
    /// Loads the MetaGraph tagged `serve` of the SavedModel in `dir`, its kernels on at
    /// most `threads` threads (intra- and inter-op) where given.
    pub fn load(dir: &Path, threads: Option<usize>) -> Result<Session, ModelError> {
        let api = api()?;
        let unreadable = ModelError::Unreadable;
        let export_dir = CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(|e| unreadable(e.to_string()))?;
        let status = Status::new(api);
        // SAFETY: every pointer passed is live for its call; options and graph are deleted
        // below or by the session's drop.
        unsafe {
            let options = (api.new_session_options)();
            if let Some(threads) = threads {
                let config = thread_config(threads);
                (api.set_config)(options, config.as_ptr().cast(), config.len(), status.1);
                if let Err(e) = status.check() {
                    (api.delete_session_options)(options);
                    return Err(ModelError::Failed(e));
                }
            }
            let graph = (api.new_graph)();
            let tags = [c"serve".as_ptr()];
            let session = (api.load_session_from_saved_model)(
                options,
                std::ptr::null(),
                export_dir.as_ptr(),
                tags.as_ptr(),
                1,
                graph,
                std::ptr::null_mut(),
                status.1,
            );
            (api.delete_session_options)(options);
            if let Err(e) = status.check() {
                (api.delete_graph)(graph);
                return Err(unreadable(e));
            }
            Ok(Session {
                api,
                graph,
                session,
            })
        }
    }

    /// The graph tensor a SignatureDef names (`op:index`, `op` meaning `op:0`).
    pub fn output(&self, tensor: &str) -> Result<Endpoint, ModelError> {
        let (op, index) = match tensor.rsplit_once(':') {
            Some((op, i)) => (op, i.parse::<c_int>().ok()),
            None => (tensor, Some(0)),
        };
        let missing = || ModelError::Unreadable(format!("the graph has no tensor {tensor}"));
        let name = CString::new(op).map_err(|_| missing())?;
        // SAFETY: the graph is live; the name a C string.
        let oper = unsafe { (self.api.graph_operation_by_name)(self.graph, name.as_ptr()) };
        let index = index.ok_or_else(missing)?;
        // SAFETY: a non-null operation of the live graph.
        if oper.is_null() || index < 0 || index >= unsafe { (self.api.operation_num_outputs)(oper) }
        {
            return Err(missing());
        }
        Ok(Endpoint(TfOutput { oper, index }))
    }

    /// Feeds `inputs` to their endpoints and fetches `outputs`, as `datatypes` say they are.
    pub fn run(
        &self,
        inputs: &[(Endpoint, Tensor)],
        outputs: &[(Endpoint, DataType)],
    ) -> Result<Vec<Tensor>, ModelError> {
        let api = self.api;
        // The bytes the input tensors' strings are views of: alive until the run ends.
        let mut fed = Vec::with_capacity(inputs.len());
        let mut kept = Vec::with_capacity(inputs.len());
        for (_, t) in inputs {
            let (tensor, bytes) = to_tf(api, t)?;
            fed.push(tensor);
            kept.push(bytes);
        }
        let ins: Vec<TfOutput> = inputs.iter().map(|(e, _)| e.0).collect();
        let values: Vec<*mut TfTensor> = fed.iter().map(|t| t.1).collect();
        let outs: Vec<TfOutput> = outputs.iter().map(|(e, _)| e.0).collect();
        let mut fetched = vec![std::ptr::null_mut(); outs.len()];
        let status = Status::new(api);
        // SAFETY: endpoints of this session's graph, live tensors, and room for every output.
        unsafe {
            (api.session_run)(
                self.session,
                std::ptr::null(),
                ins.as_ptr(),
                values.as_ptr(),
                ins.len() as c_int,
                outs.as_ptr(),
                fetched.as_mut_ptr(),
                outs.len() as c_int,
                std::ptr::null(),
                0,
                std::ptr::null_mut(),
                status.1,
            );
        }
        let fetched: Vec<Owned> = fetched
            .into_iter()
            .filter(|t| !t.is_null())
            .map(|t| Owned(api, t))
            .collect();
        drop(fed);
        drop(kept);
        status.check().map_err(ModelError::Failed)?;
        (fetched.iter().zip(outputs))
            .map(|(t, (_, datatype))| from_tf(api, t, *datatype))
            .collect()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let status = Status::new(self.api);
        // SAFETY: made by load, closed and deleted once, then its graph.
        unsafe {
            (self.api.close_session)(self.session, status.1);
            (self.api.delete_session)(self.session, status.1);
            (self.api.delete_graph)(self.graph);
        }
    }
}

/// A tensor of a session's graph, fed or fetched.
#[derive(Clone, Copy)]
pub struct Endpoint(TfOutput);

// SAFETY: a pointer into a graph that lives as long as the session using it, never mutated.
unsafe impl Send for Endpoint {}
unsafe impl Sync for Endpoint {}

/// `ConfigProto` with `intra_op_parallelism_threads` (2) and `inter_op_parallelism_threads`
/// (5) set, in protobuf's wire format.
fn thread_config(threads: usize) -> Vec<u8> {
    let mut varint = Vec::new();
    let mut n = threads as u64;
    while n >= 0x80 {
        varint.push((n as u8) | 0x80);
        n >>= 7;
    }
    varint.push(n as u8);
    let mut proto = vec![2 << 3];
    proto.extend_from_slice(&varint);
    proto.push(5 << 3);
    proto.extend_from_slice(&varint);
    proto
}

/// A TensorFlow tensor of `t`'s values, and the bytes its strings view (kept by the caller
/// until the run ends).
fn to_tf<'a>(api: &'a Api, t: &Tensor) -> Result<(Owned<'a>, Vec<u8>), ModelError> {
    let failed = |e: String| ModelError::Failed(e);
    let datatype = DataType::of(t.datum_type())
        .ok_or_else(|| failed(format!("element type {:?}", t.datum_type())))?;
    let bytes = crate::tensor::to_bytes(t, datatype).map_err(failed)?;
    let dims: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
    let strings = datatype == DataType::Bytes;
    let len = if strings {
        t.len() * TSTRING_SIZE
    } else {
        bytes.len()
    };
    // SAFETY: room for `len` bytes of the type's elements, filled below before any use.
    let tensor = unsafe {
        Owned(
            api,
            (api.allocate_tensor)(
                dtype(datatype) as c_int,
                dims.as_ptr(),
                dims.len() as c_int,
                len,
            ),
        )
    };
    if tensor.1.is_null() {
        return Err(failed("TensorFlow could not allocate an input".into()));
    }
    // SAFETY: the tensor's own buffer, `len` bytes.
    let data =
        unsafe { std::slice::from_raw_parts_mut((api.tensor_data)(tensor.1).cast::<u8>(), len) };
    if !strings {
        data.copy_from_slice(&bytes);
        return Ok((tensor, bytes));
    }
    // BYTES elements are each a u32 length and its bytes: each TF_TString views its bytes.
    let (mut at, base) = (0, bytes.as_ptr() as usize);
    for element in data.chunks_exact_mut(TSTRING_SIZE) {
        let size = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        at += 4;
        element[..8].copy_from_slice(&((size << 2) | 3).to_le_bytes());
        element[8..16].copy_from_slice(&(base + at).to_le_bytes());
        element[16..].fill(0);
        at += size;
    }
    Ok((tensor, bytes))
}

/// A fetched tensor as the engine's, of the `datatype` its signature says.
fn from_tf(api: &Api, t: &Owned, datatype: DataType) -> Result<Tensor, ModelError> {
    // SAFETY: a live tensor TF_SessionRun fetched; its data is `byte_size` bytes.
    let (dt, shape, data) = unsafe {
        let dims = (0..(api.num_dims)(t.1)).map(|i| (api.dim)(t.1, i) as usize);
        let data = std::slice::from_raw_parts(
            (api.tensor_data)(t.1).cast::<u8>(),
            (api.tensor_byte_size)(t.1),
        );
        ((api.tensor_type)(t.1), dims.collect::<Vec<_>>(), data)
    };
    if dt != dtype(datatype) as c_int {
        return Err(ModelError::Failed(format!(
            "the session answered type {dt} for a {} output",
            datatype.name()
        )));
    }
    if dt != DT_STRING {
        return crate::tensor::from_bytes(datatype, &shape, data).map_err(ModelError::Failed);
    }
    let mut bytes = Vec::with_capacity(data.len());
    for element in data.chunks_exact(TSTRING_SIZE) {
        let word = |at: usize| usize::from_le_bytes(element[at..at + 8].try_into().expect("8"));
        // SAFETY: a TF_TString of the fetched tensor: its pointer or offset is TensorFlow's.
        let value: &[u8] = unsafe {
            match element[0] & 3 {
                0 => &element[1..1 + (element[0] >> 2) as usize],
                1 => std::slice::from_raw_parts(word(16) as *const u8, word(0) >> 2),
                3 => std::slice::from_raw_parts(word(8) as *const u8, word(0) >> 2),
                _ => {
                    let size = u32::from_le_bytes(element[..4].try_into().expect("4")) >> 2;
                    let offset = u32::from_le_bytes(element[4..8].try_into().expect("4"));
                    let start = element.as_ptr().add(offset as usize);
                    std::slice::from_raw_parts(start, size as usize)
                }
            }
        };
        bytes.extend_from_slice(&(value.len() as u32).to_le_bytes());
        bytes.extend_from_slice(value);
    }
    crate::tensor::from_bytes(datatype, &shape, &bytes).map_err(ModelError::Failed)
}
