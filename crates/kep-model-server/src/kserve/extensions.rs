//! Triton's protocol extensions beyond inference, on the one served model: model
//! configuration, statistics, the model repository (index, load, unload), and the logging
//! and trace settings. Texts and status codes are Triton's, but for an unknown model or
//! version, which is a 404 here as everywhere in kep's model servers.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Map, Value, json};

use super::config::model_config;
use super::find;
use super::settings::{
    self, Change, Logging, LoggingChange, Number, Protocol, Scope, TraceChange, TraceSetting,
};
use crate::stats::{InferStatistics, ModelStatistics};
use crate::{Failure, Served};

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
}

async fn config(State(s): State<Arc<Served>>, Path(m): Path<String>) -> Answer {
    let version = find(&s, &m, None)?;
    Ok(Json(json!(model_config(&s, version))))
}

async fn config_version(
    State(s): State<Arc<Served>>,
    Path((m, v)): Path<(String, String)>,
) -> Answer {
    let version = find(&s, &m, Some(&v))?;
    Ok(Json(json!(model_config(&s, version))))
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
    if v.is_some() && find(s, m, v).is_err() {
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
        "version": s.latest().number.to_string(),
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
    let entry = |v: &crate::Version| {
        let version = v.number.to_string();
        if s.is_loaded() {
            json!({"name": s.name, "version": version, "state": "READY"})
        } else {
            json!({"name": s.name, "version": version, "state": "UNAVAILABLE", "reason": "unloaded"})
        }
    };
    let models = if ready_only && !s.is_loaded() {
        vec![]
    } else {
        s.versions.iter().map(entry).collect()
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

async fn logging(State(s): State<Arc<Served>>) -> Json<Value> {
    Json(logging_json(s.settings.logging()))
}

/// Checked in Triton's order, and applied only once all pass.
async fn set_logging(State(s): State<Arc<Served>>, body: Bytes) -> Answer {
    let request = optional_json(&body, "dynamic logging")?;
    let given = |k: &str| request.get(k).filter(|v| !v.is_null());
    if given("log_file").is_some() {
        return Err(settings::log_file_refused());
    }
    let flag = |k: &str| {
        given(k)
            .map(|v| v.as_bool().ok_or_else(|| wrong_type("boolean")))
            .transpose()
    };
    let change = LoggingChange {
        info: flag("log_info")?,
        warning: flag("log_warning")?,
        error: flag("log_error")?,
        verbose_level: given("log_verbose_level")
            .map(|v| v.as_u64().ok_or_else(|| wrong_type("unsigned-integer")))
            .transpose()?,
        iso8601: given("log_format")
            .map(|v| settings::log_format(string(v)?, Protocol::Rest))
            .transpose()?,
    };
    Ok(Json(logging_json(s.settings.change_logging(change))))
}

fn logging_json(l: Logging) -> Value {
    json!({
        "log_file": "", "log_info": l.info, "log_warning": l.warning, "log_error": l.error,
        "log_verbose_level": l.verbose_level, "log_format": l.format(),
    })
}

async fn trace(State(s): State<Arc<Served>>) -> Json<Value> {
    Json(trace_json(s.settings.trace(Scope::Server)))
}

async fn set_trace(State(s): State<Arc<Served>>, body: Bytes) -> Answer {
    change_trace(&s, Scope::Server, &body)
}

async fn model_trace(State(s): State<Arc<Served>>, Path(m): Path<String>) -> Answer {
    find(&s, &m, None)?;
    Ok(Json(trace_json(s.settings.trace(Scope::Model))))
}

async fn set_model_trace(
    State(s): State<Arc<Served>>,
    Path(m): Path<String>,
    body: Bytes,
) -> Answer {
    find(&s, &m, None)?;
    change_trace(&s, Scope::Model, &body)
}

/// A setting given as `null` is cleared; other types are Triton's JSON errors.
fn change_trace(s: &Served, scope: Scope, body: &Bytes) -> Answer {
    let request = optional_json(body, "trace")?;
    if request.contains_key("trace_file") {
        return Err(settings::trace_file_refused());
    }
    let mut change = TraceChange::default();
    match request.get("trace_level") {
        None => {}
        Some(Value::Null) => change.level = Change::Clear,
        Some(Value::Array(names)) => {
            let names = names.iter().map(string).collect::<Result<Vec<_>, _>>()?;
            if let Some(level) = settings::level(&names)? {
                change.level = Change::Set(level);
            }
        }
        Some(_) => return Err(wrong_type("array")),
    }
    for number in Number::ALL {
        match request.get(number.name()) {
            None => {}
            Some(Value::Null) => number.clear(&mut change),
            Some(v) => number.read(string(v)?, Protocol::Rest, &mut change)?,
        }
    }
    Ok(Json(trace_json(s.settings.change_trace(scope, &change)?)))
}

fn trace_json(t: TraceSetting) -> Value {
    let mut answer = json!({
        "trace_level": t.level.names(),
        "trace_file": TraceSetting::FILE,
        "trace_mode": TraceSetting::MODE,
    });
    for number in Number::ALL {
        answer[number.name()] = json!(number.of(&t));
    }
    answer
}

fn string(v: &Value) -> Result<&str, Failure> {
    v.as_str().ok_or_else(|| wrong_type("string"))
}

/// TritonJson's words for a value of another type (a 500 in Triton, a 400 here as every
/// bad request is).
fn wrong_type(what: &str) -> Failure {
    Failure::bad_request(format!("attempt to access JSON non-{what} as {what}"))
}
