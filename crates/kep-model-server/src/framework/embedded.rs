//! The framework worker's script run by a Python interpreter inside this process: the
//! framework Python's own `libpython`, opened at run time, its `sys.path` that Python's.
//! A call is then a function call under Python's lock rather than a frame over a pipe and
//! two hand-overs between threads (BENCHMARKS.md, issue #46). Frames are the same as the
//! worker process's (`worker.py`, `call`).

#![expect(
    unsafe_code,
    reason = "CPython's C API reached through its functions' pointers; each use says SAFETY"
)]

use std::ffi::{CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};

use serde::Deserialize;

enum PyObject {}
type PySsize = isize;

/// `Py_file_input`: a module's statements.
const FILE_INPUT: c_int = 257;
/// `PyBUF_WRITE`: a memoryview Python may write through (torch.from_numpy wants one).
const BUF_WRITE: c_int = 0x200;

/// The functions of CPython's stable API kep calls.
struct Api {
    decode_locale: unsafe extern "C" fn(*const c_char, *mut usize) -> *mut c_void,
    set_python_home: unsafe extern "C" fn(*const c_void),
    initialize_ex: unsafe extern "C" fn(c_int),
    run_simple_string: unsafe extern "C" fn(*const c_char) -> c_int,
    import_add_module: unsafe extern "C" fn(*const c_char) -> *mut PyObject,
    module_get_dict: unsafe extern "C" fn(*mut PyObject) -> *mut PyObject,
    run_string:
        unsafe extern "C" fn(*const c_char, c_int, *mut PyObject, *mut PyObject) -> *mut PyObject,
    dict_get_item_string: unsafe extern "C" fn(*mut PyObject, *const c_char) -> *mut PyObject,
    eval_save_thread: unsafe extern "C" fn() -> *mut c_void,
    eval_restore_thread: unsafe extern "C" fn(*mut c_void),
    gil_ensure: unsafe extern "C" fn() -> c_int,
    memoryview_from_memory: unsafe extern "C" fn(*mut c_char, PySsize, c_int) -> *mut PyObject,
    call_function_obj_args: unsafe extern "C" fn(*mut PyObject, ...) -> *mut PyObject,
    bytes_as_string_and_size:
        unsafe extern "C" fn(*mut PyObject, *mut *mut c_char, *mut PySsize) -> c_int,
    dec_ref: unsafe extern "C" fn(*mut PyObject),
    err_print: unsafe extern "C" fn(),
    _library: libloading::os::unix::Library,
}

/// The interpreter, for as long as the process runs, and the threads that call into it.
pub struct Interpreter {
    jobs: Mutex<Sender<Job>>,
    script: Arc<Script>,
}

/// Work for a caller thread: a whole model call, so that no second hand-over follows the
/// one to the thread.
pub type Job = Box<dyn FnOnce() + Send>;

thread_local! {
    /// A caller thread's Python thread state while it does not hold Python's lock; null on
    /// other threads.
    static STATE: std::cell::Cell<*mut c_void> = const { std::cell::Cell::new(std::ptr::null_mut()) };
}

/// The script's `call`, used on the caller threads only, each holding Python's lock.
struct Script {
    api: Api,
    call: *mut PyObject,
}

// SAFETY: `call` is only touched holding Python's lock, from whichever thread holds it.
unsafe impl Send for Script {}
unsafe impl Sync for Script {}

static INTERPRETER: OnceLock<Result<Interpreter, String>> = OnceLock::new();

/// What the framework Python says of itself, to be run inside this process.
#[derive(Deserialize)]
struct Found {
    library: PathBuf,
    home: String,
    path: Vec<String>,
    executable: String,
}

/// The process's interpreter, started on first use with `python`'s library, home and path,
/// the frameworks' compute on at most `threads` threads, called by `instances` threads
/// (Triton's model instances: that many calls at once), the first use's. One per process,
/// as CPython allows.
pub fn interpreter(
    python: &Path,
    threads: Option<usize>,
    instances: usize,
) -> Result<&'static Interpreter, String> {
    INTERPRETER
        .get_or_init(|| Interpreter::start(python, threads, instances))
        .as_ref()
        .map_err(Clone::clone)
}

impl Interpreter {
    fn start(
        python: &Path,
        threads: Option<usize>,
        instances: usize,
    ) -> Result<Interpreter, String> {
        let found = find(python)?;
        // SAFETY: libpython's initialisers are CPython's own. RTLD_GLOBAL: extension modules
        // (numpy's, torch's) take the interpreter's symbols from the global scope.
        let library = unsafe {
            libloading::os::unix::Library::open(
                Some(&found.library),
                libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
            )
        }
        .map_err(|e| format!("{} cannot be opened: {e}", found.library.display()))?;
        macro_rules! find {
            ($name:literal) => {
                // SAFETY: each type above is the function's in CPython's headers.
                *unsafe { library.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| format!("{}: {e}", $name))?
            };
        }
        let api = Api {
            decode_locale: find!("Py_DecodeLocale"),
            set_python_home: find!("Py_SetPythonHome"),
            initialize_ex: find!("Py_InitializeEx"),
            run_simple_string: find!("PyRun_SimpleString"),
            import_add_module: find!("PyImport_AddModule"),
            module_get_dict: find!("PyModule_GetDict"),
            run_string: find!("PyRun_String"),
            dict_get_item_string: find!("PyDict_GetItemString"),
            eval_save_thread: find!("PyEval_SaveThread"),
            eval_restore_thread: find!("PyEval_RestoreThread"),
            gil_ensure: find!("PyGILState_Ensure"),
            memoryview_from_memory: find!("PyMemoryView_FromMemory"),
            call_function_obj_args: find!("PyObject_CallFunctionObjArgs"),
            bytes_as_string_and_size: find!("PyBytes_AsStringAndSize"),
            dec_ref: find!("Py_DecRef"),
            err_print: find!("PyErr_Print"),
            _library: library,
        };
        let c = |s: &str| CString::new(s).map_err(|e| e.to_string());
        let home = c(&found.home)?;
        // JSON's strings and lists of them are Python's literals too.
        let setup = c(&format!(
            "import os, sys\nsys.path[:] = {}\nsys.executable = {}\n{}",
            serde_json::json!(found.path),
            serde_json::json!(found.executable),
            threads.map_or(String::new(), |t| {
                format!("os.environ['{}'] = '{t}'\n", super::THREADS_ENV)
            }),
        ))?;
        let script = c(super::SCRIPT)?;
        // SAFETY: CPython initialised once (this runs once per process), on this thread,
        // which then gives up Python's lock for every caller to take it in turn.
        unsafe {
            let home = (api.decode_locale)(home.as_ptr(), std::ptr::null_mut());
            // Python keeps the home's pointer: it is never freed.
            (api.set_python_home)(home);
            // 0: no signal handlers; the model server keeps its own.
            (api.initialize_ex)(0);
            let failed = |what: &str| {
                (api.err_print)();
                format!("the framework Python could not {what} in kep's process")
            };
            if (api.run_simple_string)(setup.as_ptr()) != 0 {
                return Err(failed("set its path"));
            }
            let module = (api.import_add_module)(c"kep_framework_worker".as_ptr());
            let globals = (api.module_get_dict)(module);
            let ran = (api.run_string)(script.as_ptr(), FILE_INPUT, globals, globals);
            if ran.is_null() {
                return Err(failed("run kep's worker script"));
            }
            (api.dec_ref)(ran);
            let call = (api.dict_get_item_string)(globals, c"call".as_ptr());
            if call.is_null() {
                return Err(failed("find the worker script's `call`"));
            }
            (api.eval_save_thread)();
            let script = Arc::new(Script { api, call });
            let (jobs, queue) = channel::<Job>();
            let queue = Arc::new(Mutex::new(queue));
            for i in 0..instances.max(1) {
                let (script, queue) = (Arc::clone(&script), Arc::clone(&queue));
                std::thread::Builder::new()
                    .name(format!("framework-{i}"))
                    .spawn(move || script.serve(&queue))
                    .map_err(|e| e.to_string())?;
            }
            Ok(Interpreter {
                jobs: Mutex::new(jobs),
                script,
            })
        }
    }

    /// Runs `job` on a caller thread, when one is free.
    pub fn execute(&self, job: Job) -> Result<(), String> {
        (self.jobs.lock().unwrap_or_else(|e| e.into_inner()))
            .send(job)
            .map_err(|_| "the framework Python's caller threads are gone".to_owned())
    }

    /// Runs a request frame; returns its answer's frame. On a caller thread it runs there;
    /// elsewhere it waits for one.
    pub fn call(&'static self, mut frame: Vec<u8>) -> Result<Vec<u8>, String> {
        let state = STATE.get();
        if state.is_null() {
            let (answer, answered) = channel();
            self.execute(Box::new(move || {
                let _ = answer.send(self.call(frame));
            }))?;
            return answered
                .recv()
                .map_err(|_| "the framework Python's caller thread failed".to_owned())?;
        }
        // SAFETY: this caller thread's own state, saved when it last gave up the lock; the
        // lock is given up again before the next job.
        unsafe { (self.script.api.eval_restore_thread)(state) };
        let answered = self.script.call(&mut frame);
        STATE.set(unsafe { (self.script.api.eval_save_thread)() });
        answered
    }
}

impl Script {
    /// A caller thread: one Python thread state for its life (made once, not on every
    /// call), and the same thread for the framework's own thread team each time: calls from
    /// ever-changing threads (the blocking pool's) ran the same TorchScript module a quarter
    /// slower, two threads taking turns slower still (BENCHMARKS.md, issue #46).
    fn serve(&self, queue: &Mutex<Receiver<Job>>) {
        // SAFETY: the thread's state is made holding the lock, then the lock given up.
        STATE.set(unsafe {
            (self.api.gil_ensure)();
            (self.api.eval_save_thread)()
        });
        loop {
            let job = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
            let Ok(job) = job else {
                return;
            };
            job();
        }
    }

    /// Runs a request frame, holding Python's lock; returns its answer's frame.
    fn call(&self, frame: &mut [u8]) -> Result<Vec<u8>, String> {
        let api = &self.api;
        let len = PySsize::try_from(frame.len()).map_err(|e| e.to_string())?;
        // SAFETY: Python's lock held throughout; the memoryview is of `frame`, alive and
        // borrowed mutably until the call returns (the script keeps no view of it); the
        // answer's bytes are copied out before their object is released.
        unsafe {
            let view = (api.memoryview_from_memory)(frame.as_mut_ptr().cast(), len, BUF_WRITE);
            let answer = if view.is_null() {
                std::ptr::null_mut()
            } else {
                let answer =
                    (api.call_function_obj_args)(self.call, view, std::ptr::null_mut::<PyObject>());
                (api.dec_ref)(view);
                answer
            };
            let (mut data, mut size) = (std::ptr::null_mut(), 0);
            let copied = if answer.is_null()
                || (api.bytes_as_string_and_size)(answer, &mut data, &mut size) != 0
            {
                (api.err_print)();
                Err("the framework Python failed outside a model's call".to_owned())
            } else {
                Ok(std::slice::from_raw_parts(data.cast::<u8>(), size as usize).to_vec())
            };
            if !answer.is_null() {
                (api.dec_ref)(answer);
            }
            copied
        }
    }
}

/// The framework Python's `libpython`, home and path, asked of it.
fn find(python: &Path) -> Result<Found, String> {
    let ask = "import json, os, sys, sysconfig\n\
        v = sysconfig.get_config_var\n\
        print(json.dumps({'library': os.path.join(v('LIBDIR') or '', v('INSTSONAME') or ''),\n\
        \x20   'home': sys.base_prefix, 'path': sys.path, 'executable': sys.executable}))";
    let out = std::process::Command::new(python)
        .args(["-c", ask])
        .output()
        .map_err(|e| format!("{} cannot run: {e}", python.display()))?;
    if !out.status.success() {
        return Err(format!("{} failed: {}", python.display(), out.status));
    }
    let found: Found = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    if !found.library.is_file() {
        return Err(format!(
            "{} has no shared libpython ({} is missing)",
            python.display(),
            found.library.display()
        ));
    }
    Ok(found)
}
