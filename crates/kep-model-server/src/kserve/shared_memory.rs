//! Triton's system shared memory extension over REST: `/v2/systemsharedmemory[/region/{r}]`
//! `/status`, `/register` and `/unregister`, with Triton's texts. The regions themselves are
//! `crate::shm`'s; inference reads and writes them through `decode` and `answer`. The same
//! calls under `/v2/cudasharedmemory` answer as a Triton built without GPU support does.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use super::extensions::optional_json;
use crate::shm::Region;
use crate::{Failure, Served};

type Answer = Result<Json<Value>, Failure>;

pub fn router() -> Router<Arc<Served>> {
    Router::new()
        .route("/v2/systemsharedmemory/status", get(status_all))
        .route("/v2/systemsharedmemory/region/{r}/status", get(status))
        .route("/v2/systemsharedmemory/register", post(register_unnamed))
        .route("/v2/systemsharedmemory/region/{r}/register", post(register))
        .route("/v2/systemsharedmemory/unregister", post(unregister_all))
        .route(
            "/v2/systemsharedmemory/region/{r}/unregister",
            post(unregister),
        )
        .route("/v2/cudasharedmemory/status", get(cuda_status_all))
        .route("/v2/cudasharedmemory/region/{r}/status", get(cuda_status))
        .route("/v2/cudasharedmemory/register", post(cuda_register_unnamed))
        .route(
            "/v2/cudasharedmemory/region/{r}/register",
            post(cuda_register),
        )
        .route("/v2/cudasharedmemory/unregister", post(cuda_unregister))
        .route(
            "/v2/cudasharedmemory/region/{r}/unregister",
            post(cuda_unregister),
        )
}

fn statuses(regions: Vec<Arc<Region>>) -> Json<Value> {
    Json(Value::Array(
        regions
            .iter()
            .map(|r| json!({"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}))
            .collect(),
    ))
}

async fn status_all(State(s): State<Arc<Served>>) -> Answer {
    s.shared_memory.status(None).map(statuses)
}

async fn status(State(s): State<Arc<Served>>, Path(r): Path<String>) -> Answer {
    s.shared_memory.status(Some(&r)).map(statuses)
}

async fn register_unnamed() -> Answer {
    Err(Failure::bad_request(
        "'region name' is necessary to register system shared memory region",
    ))
}

/// `{"key": …, "offset": …, "byte_size": …}`; the offset may be left out (0).
async fn register(State(s): State<Arc<Served>>, Path(r): Path<String>, body: Bytes) -> Answer {
    let request = optional_json(&body, "register")?;
    let key = match request.get("key") {
        None => {
            return Err(Failure::bad_request(
                "Shared memory register request has no 'key' field",
            ));
        }
        Some(key) => key
            .as_str()
            .ok_or_else(|| Failure::bad_request("Unable to parse 'key'"))?,
    };
    let number = |name: &str| {
        request.get(name).map(|v| {
            v.as_u64()
                .ok_or_else(|| Failure::bad_request(format!("Unable to parse '{name}'")))
        })
    };
    let offset = number("offset").transpose()?.unwrap_or(0);
    let byte_size = number("byte_size").ok_or_else(|| {
        Failure::bad_request("Shared memory register request has no 'byte_size' field")
    })??;
    s.shared_memory.register(&r, key, offset, byte_size)?;
    Ok(Json(json!({})))
}

async fn unregister_all(State(s): State<Arc<Served>>) -> Answer {
    s.shared_memory.unregister(None)?;
    Ok(Json(json!({})))
}

async fn unregister(State(s): State<Arc<Served>>, Path(r): Path<String>) -> Answer {
    s.shared_memory.unregister(Some(&r))?;
    Ok(Json(json!({})))
}

async fn cuda_status_all() -> Json<Value> {
    Json(json!([]))
}

async fn cuda_status(State(s): State<Arc<Served>>, Path(r): Path<String>) -> Failure {
    s.shared_memory.cuda_region_missing(&r)
}

async fn cuda_register_unnamed(State(s): State<Arc<Served>>) -> Answer {
    s.shared_memory.allowed()?;
    Err(Failure::bad_request(
        "'region name' is necessary to register cuda shared memory region",
    ))
}

async fn cuda_register(State(s): State<Arc<Served>>, Path(r): Path<String>) -> Failure {
    s.shared_memory.cuda_refused(&r, true)
}

/// None is ever registered: nothing to do, once allowed.
async fn cuda_unregister(State(s): State<Arc<Served>>) -> Answer {
    s.shared_memory.allowed()?;
    Ok(Json(json!({})))
}
