//! Triton's protocol extensions beyond inference, on the one served model: model
//! configuration, statistics, the model repository (index, load, unload), and the logging
//! and trace settings. Texts and status codes are Triton's, but for an unknown model or
//! version, which is a 404 here as everywhere in kep's model servers.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde_json::{Map, Value, json};

use super::config::model_config;
use super::find;
use crate::stats::{InferStatistics, ModelStatistics};
use crate::{Failure, Served, VERSION};

type Answer = Result<Json<Value>, Failure>;

pub fn router() -> Router<Arc<Served>> {
    Router::new()
        .route("/v2/models/{m}/config", get(config))
        .route("/v2/models/{m}/versions/{v}/config", get(config_version))
        .route("/v2/models/stats", get(all_stats))
        .route("/v2/models/{m}/stats", get(stats))
        .route("/v2/models/{m}/versions/{v}/stats", get(stats_version))
        .route("/v2/repository/index", post(index))
        .route("/v2/repository/models/{m}/load", post(load))
        .route("/v2/repository/models/{m}/unload", post(unload))
        .route("/v2/logging", get(logging).post(set_logging))
        .route("/v2/trace/setting", get(trace).post(set_trace))
        .route(
            "/v2/models/{m}/trace/setting",
            get(model_trace).post(set_model_trace),
        )
        .layer(Extension(Arc::new(Settings::default())))
}

async fn config(State(s): State<Arc<Served>>, Path(m): Path<String>) -> Answer {
    find(&s, &m, None)?;
    Ok(Json(json!(model_config(&s))))
}

async fn config_version(
    State(s): State<Arc<Served>>,
    Path((m, v)): Path<(String, String)>,
) -> Answer {
    find(&s, &m, Some(&v))?;
    Ok(Json(json!(model_config(&s))))
}

async fn all_stats(State(s): State<Arc<Served>>) -> Answer {
    // Only loaded models have statistics, as only ready versions do in Triton.
    let stats = if s.is_loaded() {
        vec![model_stats(&s)]
    } else {
        vec![]
    };
    Ok(Json(json!({ "model_stats": stats })))
}

async fn stats(State(s): State<Arc<Served>>, Path(m): Path<String>) -> Answer {
    stats_of(&s, &m, None)
}

async fn stats_version(
    State(s): State<Arc<Served>>,
    Path((m, v)): Path<(String, String)>,
) -> Answer {
    stats_of(&s, &m, Some(&v))
}

fn stats_of(s: &Served, m: &str, v: Option<&str>) -> Answer {
    if m != s.name || !s.is_loaded() {
        return Err(Failure::not_found(format!(
            "requested model '{m}' is not available"
        )));
    }
    if v.is_some_and(|v| v != VERSION) {
        return Err(Failure::not_found(format!(
            "requested model version is not available for model '{m}'"
        )));
    }
    Ok(Json(json!({ "model_stats": [model_stats(s)] })))
}

/// One model version's statistics as Triton's JSON has them.
fn model_stats(s: &Served) -> Value {
    let ModelStatistics {
        last_inference,
        inference_count,
        execution_count,
        inference_stats,
    } = s.stats.snapshot();
    let InferStatistics {
        success,
        fail,
        queue,
        compute_input,
        compute_infer,
        compute_output,
        cache_hit,
        cache_miss,
    } = inference_stats;
    json!({
        "name": s.name,
        "version": VERSION,
        "last_inference": last_inference,
        "inference_count": inference_count,
        "execution_count": execution_count,
        "inference_stats": {
            "success": success, "fail": fail, "queue": queue,
            "compute_input": compute_input, "compute_infer": compute_infer,
            "compute_output": compute_output, "cache_hit": cache_hit, "cache_miss": cache_miss,
        },
        "response_stats": {},
        "batch_stats": [],
        "memory_usage": [],
    })
}

/// A request body of Triton's optional JSON: empty is none.
pub(super) fn optional_json(body: &Bytes, what: &str) -> Result<Map<String, Value>, Failure> {
    if body.is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_slice(body) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(Failure::bad_request(format!(
            "failed to parse the request JSON buffer: {what} request is not a JSON object"
        ))),
    }
}

async fn index(State(s): State<Arc<Served>>, body: Bytes) -> Answer {
    let ready_only = match optional_json(&body, "registry index")?.get("ready") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(Failure::bad_request(
                "Invalid value for 'ready': expected a boolean",
            ));
        }
    };
    let entry = if s.is_loaded() {
        json!({"name": s.name, "version": VERSION, "state": "READY"})
    } else {
        json!({"name": s.name, "version": VERSION, "state": "UNAVAILABLE", "reason": "unloaded"})
    };
    let models = if ready_only && !s.is_loaded() {
        vec![]
    } else {
        vec![entry]
    };
    Ok(Json(Value::Array(models)))
}

/// Loads the served model again after an unload; the repository holds no other model.
async fn load(State(s): State<Arc<Served>>, Path(m): Path<String>, body: Bytes) -> Answer {
    let request = optional_json(&body, "load model")?;
    // A load with another configuration or files would change what the deployment serves.
    if request
        .get("parameters")
        .and_then(Value::as_object)
        .is_some_and(|p| !p.is_empty())
    {
        return Err(Failure::not_implemented(
            "the model is the deployment's: loading it with 'config' or 'file:' parameters \
             is not supported",
        ));
    }
    if m != s.name {
        return Err(Failure::internal(format!(
            "failed to load '{m}', failed to poll from model repository"
        )));
    }
    s.set_loaded(true);
    Ok(Json(json!({})))
}

/// Unloading a model the repository does not hold succeeds, as in Triton.
async fn unload(State(s): State<Arc<Served>>, Path(m): Path<String>, body: Bytes) -> Answer {
    let request = optional_json(&body, "unload model")?;
    if let Some(v) = request
        .get("parameters")
        .and_then(|p| p.get("unload_dependents"))
        && !v.is_boolean()
    {
        return Err(Failure::bad_request(
            "Unable to parse 'unload_dependents': value is not a boolean",
        ));
    }
    if m == s.name {
        s.set_loaded(false);
    }
    Ok(Json(json!({})))
}

/// The logging and trace settings, kept as Triton answers them. kep writes no trace
/// files; its own log level is the process's `RUST_LOG`.
struct Settings {
    logging: Mutex<Map<String, Value>>,
    trace: Mutex<Map<String, Value>>,
}

impl Default for Settings {
    fn default() -> Settings {
        let object = |v: Value| match v {
            Value::Object(m) => Mutex::new(m),
            _ => unreachable!("an object literal"),
        };
        Settings {
            logging: object(json!({
                "log_file": "", "log_info": true, "log_warning": true, "log_error": true,
                "log_verbose_level": 0, "log_format": "default",
            })),
            trace: object(json!({
                "trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
                "log_frequency": "0", "trace_file": "", "trace_mode": "triton",
            })),
        }
    }
}

async fn logging(Extension(settings): Extension<Arc<Settings>>) -> Answer {
    Ok(Json(Value::Object(
        settings.logging.lock().expect("lock").clone(),
    )))
}

async fn set_logging(Extension(settings): Extension<Arc<Settings>>, body: Bytes) -> Answer {
    let request = optional_json(&body, "dynamic logging")?;
    let mut logging = settings.logging.lock().expect("lock");
    // Checked whole before any is applied.
    for (k, v) in &request {
        let fits = match k.as_str() {
            _ if v.is_null() => true,
            "log_file" => {
                return Err(Failure::not_implemented(
                    "log file location can not be updated through network protocol",
                ));
            }
            "log_info" | "log_warning" | "log_error" => v.is_boolean(),
            "log_verbose_level" => v.is_u64(),
            "log_format" => match v.as_str() {
                Some("default" | "ISO8601") => true,
                Some(other) => {
                    return Err(Failure::unavailable(format!(
                        "invalid argument for --log_format, got: {other}"
                    )));
                }
                None => false,
            },
            _ => true,
        };
        if !fits {
            return Err(Failure::bad_request(format!(
                "Unable to parse '{k}': the value has the wrong type"
            )));
        }
    }
    for (k, v) in request {
        if !v.is_null() && logging.contains_key(&k) {
            logging.insert(k, v);
        }
    }
    Ok(Json(Value::Object(logging.clone())))
}

async fn trace(Extension(settings): Extension<Arc<Settings>>) -> Answer {
    Ok(Json(Value::Object(
        settings.trace.lock().expect("lock").clone(),
    )))
}

async fn set_trace(Extension(settings): Extension<Arc<Settings>>, body: Bytes) -> Answer {
    update_trace(&settings, &body)
}

async fn model_trace(
    State(s): State<Arc<Served>>,
    Extension(settings): Extension<Arc<Settings>>,
    Path(m): Path<String>,
) -> Answer {
    find(&s, &m, None)?;
    trace(Extension(settings)).await
}

async fn set_model_trace(
    State(s): State<Arc<Served>>,
    Extension(settings): Extension<Arc<Settings>>,
    Path(m): Path<String>,
    body: Bytes,
) -> Answer {
    find(&s, &m, None)?;
    update_trace(&settings, &body)
}

/// Trace settings are strings, `trace_level` a list of `OFF`, `TIMESTAMPS`, `TENSORS`.
fn update_trace(settings: &Settings, body: &Bytes) -> Answer {
    let request = optional_json(body, "trace")?;
    let mut trace = settings.trace.lock().expect("lock");
    for (k, v) in &request {
        let fits = match k.as_str() {
            _ if v.is_null() => true,
            "trace_level" => v.as_array().is_some_and(|levels| {
                levels
                    .iter()
                    .all(|l| matches!(l.as_str(), Some("OFF" | "TIMESTAMPS" | "TENSORS")))
            }),
            "trace_rate" | "trace_count" | "log_frequency" => {
                v.as_str().is_some_and(|n| n.parse::<i64>().is_ok())
            }
            "trace_file" | "trace_mode" => v.is_string(),
            other => {
                return Err(Failure::bad_request(format!(
                    "unsupported trace setting '{other}'"
                )));
            }
        };
        if !fits {
            return Err(Failure::bad_request(format!(
                "Unable to parse '{k}': the value has the wrong type"
            )));
        }
    }
    for (k, v) in request {
        if !v.is_null() {
            trace.insert(k, v);
        }
    }
    Ok(Json(Value::Object(trace.clone())))
}
