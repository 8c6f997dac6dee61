//! Cosmos: a serving script around the model. `POST /predict` takes any JSON; the script's
//! `preprocess(request)` turns it into the model's inputs (a map of input name to nested
//! arrays), the model runs, and `postprocess(outputs, request)` turns the outputs (a map of
//! output name to nested arrays) into the answer. Scripts are Rhai: embedded, so they run
//! in the server's process with no file, network or process access, and bounded in
//! operations, call depth and data sizes.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use rhai::{AST, Dynamic, Engine, Scope};
use serde_json::{Map, Value};

use crate::model::DataType;
use crate::stats::Clock;
use crate::tensor;
use crate::{Failure, Served};

pub struct Script {
    engine: Engine,
    ast: AST,
}

impl Script {
    /// Compiles the script; it must define `preprocess(request)` and
    /// `postprocess(outputs, request)`.
    pub fn compile(source: &str) -> Result<Script, String> {
        let mut engine = Engine::new();
        engine
            .set_max_operations(50_000_000)
            .set_max_call_levels(64)
            .set_max_expr_depths(128, 64)
            .set_max_string_size(16 << 20)
            .set_max_array_size(16 << 20)
            .set_max_map_size(1 << 16);
        let ast = engine
            .compile(source)
            .map_err(|e| format!("the script: {e}"))?;
        for (name, params) in [("preprocess", 1), ("postprocess", 2)] {
            if !ast
                .iter_functions()
                .any(|f| f.name == name && f.params.len() == params)
            {
                return Err(format!(
                    "the script defines no {name}({})",
                    if params == 1 {
                        "request"
                    } else {
                        "outputs, request"
                    }
                ));
            }
        }
        Ok(Script { engine, ast })
    }

    fn call(&self, name: &str, args: Vec<Dynamic>) -> Result<Value, String> {
        let out: Dynamic = self
            .engine
            .call_fn(&mut Scope::new(), &self.ast, name, args)
            .map_err(|e| format!("{name}: {e}"))?;
        rhai::serde::from_dynamic(&out).map_err(|e| format!("{name} returned {e}"))
    }
}

fn dynamic(v: &Value) -> Result<Dynamic, Failure> {
    rhai::serde::to_dynamic(v).map_err(|e| Failure::bad_request(e.to_string()))
}

pub fn router(served: Arc<Served>, script: Arc<Script>) -> Router {
    Router::new()
        // The port opens once the model and the script are loaded.
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/predict", post(predict))
        .with_state((served, script))
}

async fn predict(
    State((served, script)): State<(Arc<Served>, Arc<Script>)>,
    body: Bytes,
) -> Result<Json<Value>, Failure> {
    let request: Value = serde_json::from_slice(&body)
        .map_err(|e| Failure::bad_request(format!("the request is not JSON: {e}")))?;
    let script_in = Arc::clone(&script);
    let req = request.clone();
    let inputs = tokio::task::spawn_blocking(move || {
        script_in
            .call("preprocess", vec![dynamic(&req)?])
            .map_err(Failure::bad_request)
    })
    .await
    .map_err(|e| Failure::bad_request(e.to_string()))??;
    let Value::Object(inputs) = inputs else {
        return Err(Failure::bad_request(
            "preprocess returns a map of input name to values",
        ));
    };
    let mut tensors = Vec::with_capacity(inputs.len());
    for (name, value) in &inputs {
        let spec = (served.model().inputs)
            .iter()
            .find(|s| &s.name == name)
            .ok_or_else(|| Failure::bad_request(format!("preprocess gave unknown input {name}")))?;
        let (shape, leaves) = tensor::flatten(value)
            .map_err(|e| Failure::bad_request(format!("input {name}: {e}")))?;
        let t = tensor::from_json(spec.datatype, &shape, &leaves, false)
            .map_err(|e| Failure::bad_request(format!("input {name}: {e}")))?;
        tensors.push((name.clone(), t));
    }
    let results = served
        .run(served.model(), &mut Clock::start(), tensors)
        .await?;
    let mut outputs = Map::new();
    for (spec, t) in served.model().outputs.iter().zip(&results) {
        let datatype = DataType::of(t.datum_type()).unwrap_or(spec.datatype);
        let data = tensor::to_data(t, datatype).map_err(Failure::bad_request)?;
        outputs.insert(spec.name.clone(), data.nest(t.shape(), false));
    }
    let answer = tokio::task::spawn_blocking(move || {
        script
            .call(
                "postprocess",
                vec![dynamic(&Value::Object(outputs))?, dynamic(&request)?],
            )
            .map_err(Failure::internal)
    })
    .await
    .map_err(|e| Failure::internal(e.to_string()))??;
    Ok(Json(answer))
}
