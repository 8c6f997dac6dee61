//! A model loaded into an engine (the built-in tract, ONNX Runtime where built and
//! installed, or its own framework's runtime in a worker process): its signature in KServe
//! v2 datatype names, checked inputs, and a run that returns every output.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tract_onnx::prelude::*;
use tract_tensorflow::tract_hir::infer::{GenericFactoid, InferenceFact, ShapeFactoid};

use crate::framework::tensorflow::Endpoint;
use crate::framework::{SignatureDef, Worker};

mod input;
pub use input::{Input, Place, TensorInPlace};

/// Tensor element types, by their KServe v2 names (CONTRACT §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum DataType {
    Bool,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Int8,
    Int16,
    Int32,
    Int64,
    Fp16,
    Fp32,
    Fp64,
    Bytes,
}

impl DataType {
    pub const ALL: [DataType; 13] = [
        DataType::Bool,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Fp16,
        DataType::Fp32,
        DataType::Fp64,
        DataType::Bytes,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::Uint8 => "UINT8",
            DataType::Uint16 => "UINT16",
            DataType::Uint32 => "UINT32",
            DataType::Uint64 => "UINT64",
            DataType::Int8 => "INT8",
            DataType::Int16 => "INT16",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Fp16 => "FP16",
            DataType::Fp32 => "FP32",
            DataType::Fp64 => "FP64",
            DataType::Bytes => "BYTES",
        }
    }

    pub fn parse(name: &str) -> Option<DataType> {
        DataType::ALL.into_iter().find(|d| d.name() == name)
    }

    pub fn datum(self) -> DatumType {
        match self {
            DataType::Bool => DatumType::Bool,
            DataType::Uint8 => DatumType::U8,
            DataType::Uint16 => DatumType::U16,
            DataType::Uint32 => DatumType::U32,
            DataType::Uint64 => DatumType::U64,
            DataType::Int8 => DatumType::I8,
            DataType::Int16 => DatumType::I16,
            DataType::Int32 => DatumType::I32,
            DataType::Int64 => DatumType::I64,
            DataType::Fp16 => DatumType::F16,
            DataType::Fp32 => DatumType::F32,
            DataType::Fp64 => DatumType::F64,
            DataType::Bytes => DatumType::String,
        }
    }

    /// The protocol type of an engine type; `TDim` (symbolic sizes) reads as INT64.
    pub fn of(dt: DatumType) -> Option<DataType> {
        Some(match dt.unquantized() {
            DatumType::TDim => DataType::Int64,
            DatumType::Blob => DataType::Bytes,
            other => DataType::ALL.into_iter().find(|d| d.datum() == other)?,
        })
    }

    /// The name in a Triton model configuration (`data_type`): `TYPE_` and the name, BYTES
    /// being `TYPE_STRING`.
    pub fn config_name(self) -> &'static str {
        match self {
            DataType::Bool => "TYPE_BOOL",
            DataType::Uint8 => "TYPE_UINT8",
            DataType::Uint16 => "TYPE_UINT16",
            DataType::Uint32 => "TYPE_UINT32",
            DataType::Uint64 => "TYPE_UINT64",
            DataType::Int8 => "TYPE_INT8",
            DataType::Int16 => "TYPE_INT16",
            DataType::Int32 => "TYPE_INT32",
            DataType::Int64 => "TYPE_INT64",
            DataType::Fp16 => "TYPE_FP16",
            DataType::Fp32 => "TYPE_FP32",
            DataType::Fp64 => "TYPE_FP64",
            DataType::Bytes => "TYPE_STRING",
        }
    }

    /// Bytes per element in the binary tensor format; `None` for BYTES.
    pub fn size(self) -> Option<usize> {
        (self != DataType::Bytes).then(|| self.datum().size_of())
    }
}

/// One input or output: its name, element type and shape, -1 for a variable dimension.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorSpec {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
}

impl TensorSpec {
    fn of(name: &str, fact: &TypedFact) -> Result<TensorSpec, ModelError> {
        let datatype = DataType::of(fact.datum_type).ok_or_else(|| {
            ModelError::Unsupported(format!("{name}: element type {:?}", fact.datum_type))
        })?;
        Ok(TensorSpec {
            name: name.to_owned(),
            datatype,
            shape: fact
                .shape
                .iter()
                .map(|d| d.as_i64().unwrap_or(-1))
                .collect(),
        })
    }

    /// Whether `shape` fits this spec: the same rank, and every fixed dimension equal.
    pub fn accepts(&self, shape: &[usize]) -> bool {
        self.shape.len() == shape.len()
            && self
                .shape
                .iter()
                .zip(shape)
                .all(|(&want, &got)| want < 0 || want as usize == got)
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ModelError {
    /// The artifact cannot be read as a model.
    #[error("the model cannot be read: {0}")]
    Unreadable(String),
    /// The engine cannot run it (an operator or a type it does not support).
    #[error("the engine cannot run this model: {0}")]
    Unsupported(String),
    /// A request that does not fit the model's signature.
    #[error("{0}")]
    BadInput(InputError),
    /// The chosen engine is not built in or cannot be loaded.
    #[error("{0}")]
    EngineUnavailable(String),
    /// The engine failed while running valid inputs.
    #[error("inference failed: {0}")]
    Failed(String),
}

/// How given inputs miss the model's signature: each protocol words it as its server does.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InputError {
    #[error("missing input {}", .missing.join(", "))]
    Missing {
        given: Vec<String>,
        missing: Vec<String>,
    },
    #[error("unexpected input {name}: the model's inputs are {}", .inputs.join(", "))]
    Unexpected { name: String, inputs: Vec<String> },
    #[error("input {name}: datatype {} where the model takes {}", .given.map_or("?", DataType::name), .want.name())]
    DataType {
        name: String,
        given: Option<DataType>,
        want: DataType,
    },
    #[error("input {name}: shape {given:?} where the model takes {want:?}")]
    Shape {
        name: String,
        given: Vec<usize>,
        want: Vec<i64>,
    },
    /// A batched model's call of more elements than its `max_batch_size` (Triton's words).
    #[error("inference request batch-size must be <= {max}")]
    BatchSize { given: usize, max: usize },
    /// A batched model's call whose inputs do not share their first dimension.
    #[error("the inputs' batch dimensions differ: {}", .sizes.iter().map(|(n, s)| format!("{n} {s}")).collect::<Vec<_>>().join(", "))]
    BatchDimensions { sizes: Vec<(String, usize)> },
}

/// A model's inputs and outputs.
pub type Signature = (Vec<TensorSpec>, Vec<TensorSpec>);

/// Which engine runs a model: a setting, and per deployment the `KEP_ENGINE` variable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// tract, built in, pure Rust.
    #[default]
    Tract,
    /// ONNX Runtime, loaded from the user's `libonnxruntime` (the `onnxruntime` feature).
    OnnxRuntime,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Tract => "tract",
            Engine::OnnxRuntime => "onnxruntime",
        }
    }
}

impl std::str::FromStr for Engine {
    type Err = String;

    fn from_str(s: &str) -> Result<Engine, String> {
        [Engine::Tract, Engine::OnnxRuntime]
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| format!("{s:?} is not an engine: tract or onnxruntime"))
    }
}

/// The signature of a model artifact, read without preparing it to run. tract reads it;
/// a model tract cannot type (an operator it lacks) is read by ONNX Runtime where that is
/// available, so it can still be served by that engine.
pub fn inspect(path: &Path) -> Result<(Signature, Format), ModelError> {
    let read =
        inference_model(path).and_then(|(model, format)| Ok((signature(&typed(model)?)?, format)));
    #[cfg(feature = "onnxruntime")]
    if read.is_err()
        && let Ok((signature, _)) = crate::onnxruntime::load(path)
    {
        return Ok((signature, Format::Onnx));
    }
    read
}

/// What an artifact is (CONTRACT §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Onnx,
    /// A TensorFlow frozen GraphDef.
    FrozenGraph,
    /// A TensorFlow SavedModel directory, run by TensorFlow.
    SavedModel,
    /// A TorchScript file, run by libtorch.
    TorchScript,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Onnx => "onnx",
            Format::FrozenGraph => "graphdef",
            Format::SavedModel => "savedmodel",
            Format::TorchScript => "torchscript",
        }
    }

    /// The format a stored name says; a model stored before formats were kept (no name)
    /// is one file, told by its bytes.
    pub fn stored(name: &str, path: &Path) -> Option<Format> {
        match name {
            "" if is_onnx(path) => Some(Format::Onnx),
            "" => Some(Format::FrozenGraph),
            _ => [
                Format::Onnx,
                Format::FrozenGraph,
                Format::SavedModel,
                Format::TorchScript,
            ]
            .into_iter()
            .find(|f| f.name() == name),
        }
    }
}

/// Whether the artifact is an ONNX model (else a TensorFlow frozen GraphDef, or nothing).
pub fn is_onnx(path: &Path) -> bool {
    tract_onnx::onnx().proto_model_for_path(path).is_ok()
}

/// The artifact as an ONNX model, else as a TensorFlow frozen GraphDef (the two protobuf
/// messages do not parse as each other).
fn inference_model(path: &Path) -> Result<(InferenceModel, Format), ModelError> {
    match tract_onnx::onnx().model_for_path(path) {
        Ok(mut model) => {
            open_unknown_dims(&mut model).map_err(|e| ModelError::Unreadable(format!("{e:#}")))?;
            Ok((model, Format::Onnx))
        }
        Err(onnx) => frozen_graph(path)
            .map(|model| (model, Format::FrozenGraph))
            .map_err(|tf| {
                ModelError::Unreadable(format!(
                    "neither ONNX ({onnx:#}) nor a TensorFlow frozen GraphDef ({tf:#})"
                ))
            }),
    }
}

/// The model with every type and shape known: what the engine cannot type fails here.
fn typed(model: InferenceModel) -> Result<TypedModel, ModelError> {
    model
        .into_typed()
        .map_err(|e| ModelError::Unsupported(format!("{e:#}")))
}

/// A frozen GraphDef (or the graph of a SavedModel without variables): its Placeholders are
/// the inputs and its sinks that yield a tensor the outputs; a `-1` dimension of a Placeholder's shape becomes a
/// variable one, as ONNX's named ones are.
fn frozen_graph(path: &Path) -> TractResult<InferenceModel> {
    use prost::Message as _;
    use tract_tensorflow::tfpb::tensorflow::{GraphDef, SavedModel};
    let bytes = std::fs::read(path)?;
    // A SavedModel's first graph is read too: it is what TF Serving is given.
    let graph = match GraphDef::decode(bytes.as_slice()) {
        Ok(graph) => graph,
        Err(frozen) => SavedModel::decode(bytes.as_slice())
            .ok()
            .and_then(|mut saved| {
                (!saved.meta_graphs.is_empty()).then(|| saved.meta_graphs.remove(0))
            })
            .and_then(|meta| meta.graph_def)
            .ok_or(frozen)?,
    };
    let mut model = tract_tensorflow::tensorflow().model_for_proto_model(&graph)?;
    // tract takes every sink for an output, and gives an op that yields no tensor (the
    // `NoOp`s TensorFlow's own freezing leaves) a BOOL scalar: only those that yield one are.
    let no_tensor: Vec<&str> = graph
        .node
        .iter()
        .filter(|n| YIELD_NO_TENSOR.contains(&n.op.as_str()))
        .map(|n| n.name.as_str())
        .collect();
    let outputs: Vec<_> = (model.outputs.iter().copied())
        .filter(|o| !no_tensor.contains(&model.node(o.node).name.as_str()))
        .collect();
    model.select_output_outlets(&outputs)?;
    open_unknown_dims(&mut model)?;
    Ok(model)
}

/// TensorFlow ops that have no output (op_def's `output_arg` empty) and may be left in a
/// frozen graph: never one of its outputs.
const YIELD_NO_TENSOR: &[&str] = &[
    "NoOp",
    "Assert",
    "ControlTrigger",
    "SaveV2",
    "MergeV2Checkpoints",
];

/// A dimension an input declares without a size or a name (ONNX's empty `dim`, as
/// `onnx.helper` writes `None`; TensorFlow's `-1`) or as `-1` (some ONNX exporters) becomes
/// a variable one of its own, as a named ONNX dimension is; tract cannot type a model
/// whose input has a dimension it knows nothing of. An output's `-1` is left to inference.
fn open_unknown_dims(model: &mut InferenceModel) -> TractResult<()> {
    for i in 0..model.inputs.len() {
        if let Some(fact) = reopened(model.input_fact(i)?, || {
            GenericFactoid::Only(model.symbols.new_with_prefix("n").to_dim())
        }) {
            model.set_input_fact(i, fact)?;
        }
    }
    for i in 0..model.outputs.len() {
        if let Some(fact) = reopened(model.output_fact(i)?, || GenericFactoid::Any) {
            model.set_output_fact(i, fact)?;
        }
    }
    Ok(())
}

/// `fact` with each unknown dimension replaced by what `open` gives; `None` when it has none.
fn reopened(
    fact: &InferenceFact,
    mut open: impl FnMut() -> GenericFactoid<TDim>,
) -> Option<InferenceFact> {
    let unknown = |d: &GenericFactoid<TDim>| match d {
        GenericFactoid::Any => true,
        GenericFactoid::Only(d) => d.as_i64().is_some_and(|n| n < 0),
    };
    if fact.shape.is_open() || !fact.shape.dims().any(unknown) {
        return None;
    }
    let mut fact = fact.clone();
    let dims = fact
        .shape
        .dims()
        .map(|d| if unknown(d) { open() } else { d.clone() })
        .collect();
    fact.shape = ShapeFactoid::closed(dims);
    Some(fact)
}

fn signature(model: &TypedModel) -> Result<Signature, ModelError> {
    let specs = |outlets: &[OutletId]| {
        outlets
            .iter()
            .map(|o| {
                let fact = model
                    .outlet_fact(*o)
                    .map_err(|e| ModelError::Unsupported(format!("{e:#}")))?;
                let node = model.node(o.node);
                // A node with several outputs names each `node:slot`, as ONNX does not.
                let name = if node.outputs.len() > 1 {
                    model
                        .outlet_label(*o)
                        .map(str::to_owned)
                        .unwrap_or_else(|| format!("{}:{}", node.name, o.slot))
                } else {
                    model
                        .outlet_label(*o)
                        .map_or_else(|| node.name.clone(), str::to_owned)
                };
                TensorSpec::of(&name, fact)
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let inputs = specs(
        model
            .input_outlets()
            .map_err(|e| ModelError::Unsupported(e.to_string()))?,
    )?;
    let outputs = specs(
        model
            .output_outlets()
            .map_err(|e| ModelError::Unsupported(e.to_string()))?,
    )?;
    Ok((inputs, outputs))
}

/// A model ready to run, shared by concurrent calls.
pub struct Model {
    pub format: Format,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    runner: Runner,
}

enum Runner {
    Tract(Arc<TypedRunnableModel>),
    #[cfg(feature = "onnxruntime")]
    OnnxRuntime(crate::onnxruntime::OrtModel),
    /// A SavedModel's signature in this process: the graph tensors it feeds and fetches,
    /// in the model's order of its inputs and outputs.
    Session {
        session: Arc<crate::framework::tensorflow::Session>,
        feeds: Vec<Endpoint>,
        fetches: Vec<(Endpoint, DataType)>,
    },
    /// A model loaded under `key` in a framework worker, run by its `signature`.
    Framework {
        worker: Arc<Worker>,
        key: String,
        signature: String,
    },
}

impl Model {
    /// Loads, optimizes and prepares the model in `engine`: what the engine cannot run
    /// fails here, not at the first call.
    pub fn load(path: &Path, engine: Engine) -> Result<Model, ModelError> {
        let ((inputs, outputs), format, runner) = match engine {
            Engine::Tract => {
                let (model, format) = inference_model(path)?;
                let typed = typed(model)?;
                let signature = signature(&typed)?;
                let plan = typed
                    .into_optimized()
                    .and_then(|m| m.into_runnable())
                    .map_err(|e| ModelError::Unsupported(format!("{e:#}")))?;
                (signature, format, Runner::Tract(plan))
            }
            #[cfg(feature = "onnxruntime")]
            Engine::OnnxRuntime => {
                let (signature, model) = crate::onnxruntime::load(path)?;
                (signature, Format::Onnx, Runner::OnnxRuntime(model))
            }
            #[cfg(not(feature = "onnxruntime"))]
            Engine::OnnxRuntime => {
                return Err(ModelError::EngineUnavailable(
                    "this kep was built without the onnxruntime feature".into(),
                ));
            }
        };
        Ok(Model {
            format,
            inputs,
            outputs,
            runner,
        })
    }

    /// The model `signature` of the model loaded under `key` in `worker` names.
    pub fn in_framework(
        worker: Arc<Worker>,
        key: &str,
        format: Format,
        signature: &SignatureDef,
    ) -> Model {
        Model {
            format,
            inputs: signature.inputs.clone(),
            outputs: signature.outputs.clone(),
            runner: Runner::Framework {
                worker,
                key: key.to_owned(),
                signature: signature.name.clone(),
            },
        }
    }

    /// A SavedModel signature run by `session`: each input and output with the graph
    /// tensor it is.
    pub fn in_session(
        session: Arc<crate::framework::tensorflow::Session>,
        inputs: Vec<(TensorSpec, Endpoint)>,
        outputs: Vec<(TensorSpec, Endpoint)>,
    ) -> Model {
        let fetches = outputs.iter().map(|(s, e)| (*e, s.datatype)).collect();
        let (inputs, feeds) = inputs.into_iter().unzip();
        Model {
            format: Format::SavedModel,
            inputs,
            outputs: outputs.into_iter().map(|(s, _)| s).collect(),
            runner: Runner::Session {
                session,
                feeds,
                fetches,
            },
        }
    }

    /// The interpreter whose threads the model's calls run on, where it runs inside this
    /// process's Python.
    pub fn interpreter(&self) -> Option<&'static crate::framework::Interpreter> {
        match &self.runner {
            Runner::Framework { worker, .. } => worker.interpreter(),
            _ => None,
        }
    }

    /// The engine that runs the model, by name.
    pub fn engine_name(&self) -> &'static str {
        match (&self.runner, self.format) {
            (Runner::Tract(_), _) => Engine::Tract.name(),
            #[cfg(feature = "onnxruntime")]
            (Runner::OnnxRuntime(_), _) => Engine::OnnxRuntime.name(),
            (Runner::Framework { .. }, Format::TorchScript) => "libtorch",
            (Runner::Framework { .. } | Runner::Session { .. }, _) => "tensorflow",
        }
    }

    /// Runs the model on named inputs (every input of the model, no other); returns every
    /// output, in the model's order.
    pub fn run(&self, mut given: Vec<(String, Input)>) -> Result<Vec<Tensor>, ModelError> {
        let mut ordered = Vec::with_capacity(self.inputs.len());
        let mut missing = Vec::new();
        for spec in &self.inputs {
            let Some(i) = given.iter().position(|(n, _)| *n == spec.name) else {
                missing.push(spec.name.clone());
                continue;
            };
            let (_, input) = given.swap_remove(i);
            let datatype = input.datatype();
            if datatype != Some(spec.datatype) {
                return Err(ModelError::BadInput(InputError::DataType {
                    name: spec.name.clone(),
                    given: datatype,
                    want: spec.datatype,
                }));
            }
            if !spec.accepts(input.shape()) {
                return Err(ModelError::BadInput(InputError::Shape {
                    name: spec.name.clone(),
                    given: input.shape().to_vec(),
                    want: spec.shape.clone(),
                }));
            }
            ordered.push(input);
        }
        let names = |specs: &[TensorSpec]| specs.iter().map(|s| s.name.clone()).collect();
        if let Some((name, _)) = given.first() {
            return Err(ModelError::BadInput(InputError::Unexpected {
                name: name.clone(),
                inputs: names(&self.inputs),
            }));
        }
        if !missing.is_empty() {
            let mut given: Vec<String> = names(&self.inputs);
            given.retain(|n| !missing.contains(n));
            return Err(ModelError::BadInput(InputError::Missing { given, missing }));
        }
        match &self.runner {
            Runner::Tract(plan) => {
                let inputs = ordered
                    .into_iter()
                    .map(|input| input.into_tensor().map(Tensor::into_tvalue))
                    .collect::<Result<_, _>>()
                    .map_err(ModelError::Failed)?;
                let outputs = plan
                    .run(inputs)
                    .map_err(|e| ModelError::Failed(format!("{e:#}")))?;
                Ok(outputs.into_iter().map(|v| v.into_tensor()).collect())
            }
            #[cfg(feature = "onnxruntime")]
            Runner::OnnxRuntime(model) => {
                let named = self.inputs.iter().map(|s| s.name.as_str()).zip(ordered);
                model.run(named.collect(), &self.outputs)
            }
            Runner::Session {
                session,
                feeds,
                fetches,
            } => {
                let inputs = (feeds.iter().copied())
                    .zip(ordered.into_iter().map(Input::into_tensor))
                    .map(|(feed, t)| t.map(|t| (feed, t)))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(ModelError::Failed)?;
                session.run(&inputs, fetches)
            }
            Runner::Framework {
                worker,
                key,
                signature,
            } => {
                let inputs = (self.inputs.iter().map(|s| s.name.clone()))
                    .zip(ordered.into_iter().map(Input::into_tensor))
                    .map(|(name, t)| t.map(|t| (name, t)))
                    .collect::<Result<_, _>>()
                    .map_err(ModelError::Failed)?;
                let outputs: Vec<String> = self.outputs.iter().map(|s| s.name.clone()).collect();
                worker.run(key, signature, inputs, &outputs)
            }
        }
    }
}
