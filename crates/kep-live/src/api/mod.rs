//! Wire types and handlers of the live API.

mod media;
pub mod operator;
mod rpc;
use kep_api::live as wire;
mod ws;

pub use ws::parse_message;

use axum::Router;
use axum::http::{HeaderName, Method, header};
use axum::routing::{delete, get, post};
use serde::de::DeserializeOwned;
use utoipa::OpenApi;

use crate::{LiveError, LiveService};
use kep_api::live::paths;

pub(crate) fn router(live: LiveService) -> Router {
    let offers = axum::extract::DefaultBodyLimit::max(live.0.settings.body_limit_bytes);
    // A web app of any origin may load the SDK and make WHIP and WHEP calls: they carry
    // a join token in a header, never a cookie, so no origin gains anything by it.
    let cors = tower_http::cors::CorsLayer::new()
        .allow_origin(tower_http::cors::Any)
        .allow_methods([Method::GET, Method::POST, Method::PATCH, Method::DELETE])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::IF_MATCH,
        ])
        .expose_headers([header::LOCATION, HeaderName::from_static("kep-stream-id")]);
    let media = Router::new()
        .route(paths::WHIP, post(media::publish).layer(offers))
        .route(
            paths::WHIP_SESSION,
            delete(media::end_publish)
                .patch(media::trickle_publish)
                .fallback(media::other_method)
                .layer(offers),
        )
        .route(paths::WHEP, post(media::subscribe).layer(offers))
        .route(
            paths::WHEP_SESSION,
            delete(media::end_subscribe)
                .patch(media::trickle_subscribe)
                .fallback(media::other_method)
                .layer(offers),
        )
        .route(paths::SDK, get(sdk))
        .layer(cors);
    Router::new()
        .route(paths::RPC, post(rpc::rpc).fallback(rpc::not_post))
        .route(paths::WS, get(ws::participant_socket))
        .route(paths::DEMO, get(demo))
        .merge(media)
        .with_state(live)
}

/// The browser client SDK, built into the binary.
async fn sdk() -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/javascript; charset=utf-8",
        )],
        include_str!("../../web/kep-live.js"),
    )
}

/// A page that joins a room with a join token, publishes its camera and shows the others.
async fn demo() -> axum::response::Html<&'static str> {
    axum::response::Html(include_str!("../../web/demo.html"))
}

/// The 429 of `POST /api/rpc`: a JSON-RPC answer, error -32005.
const LIMIT_ANSWERS: kep_core::http::LimitAnswers =
    kep_core::http::LimitAnswers(Some("RpcResponse"));

/// OpenAPI of the live listener.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "kep live API",
        description = "Provision and Room.* over JSON-RPC 2.0 (seed 000); WHIP publish and WHEP subscribe with join tokens"
    ),
    paths(
        rpc::rpc,
        media::publish,
        media::subscribe,
        media::end_publish,
        media::end_subscribe,
        media::trickle_publish,
        media::trickle_subscribe
    ),
    modifiers(&LIMIT_ANSWERS),
    components(schemas(
        wire::RpcResponse,
        wire::RpcError,
        wire::ProvisionParams,
        wire::ProvisionAuth,
        wire::ProvisionResult,
        wire::VersionParams,
        wire::RoomParams,
        wire::ParticipantTarget,
        wire::StreamTarget,
        wire::ListParticipantsResult,
        wire::ParticipantInfo,
        wire::StreamInfo,
        wire::TrackInfo,
        wire::DestroyRoomResult,
        wire::Scheme
    ))
)]
pub struct LiveApiDoc;

/// Parses JSON text into `T` as its schema reads it (a whole float is an integer, as many
/// encoders write integers); a failure names the field at fault (`targets[1].streamId`).
pub(crate) fn parse_params<T: DeserializeOwned>(json: &str) -> Result<T, LiveError> {
    // Reading it as a schema does, path tracked, costs on every call: only what the plain
    // parse refuses is read again so.
    if let Ok(parsed) = serde_json::from_str(json) {
        return Ok(parsed);
    }
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| LiveError::Parse(e.to_string()))?;
    kep_core::json::deserialize(value).map_err(|e| {
        let (field, reason) = kep_core::http::field_error(e);
        LiveError::invalid_params(field, reason)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn params_errors_name_the_field() {
        let err = parse_params::<wire::RoomParams>("{}").unwrap_err();
        assert!(
            matches!(err, LiveError::InvalidParams { ref field, .. } if field == "roomId"),
            "{err:?}"
        );
        let err = parse_params::<wire::TargetsParams<wire::StreamTarget>>(
            r#"{"roomId": "r", "targets": [{"participantId": "a", "streamId": 1}, {"participantId": "b", "streamId": "x"}]}"#,
        )
        .unwrap_err();
        assert!(
            matches!(err, LiveError::InvalidParams { ref field, .. } if field == "targets[1].streamId"),
            "{err:?}"
        );
        let err = parse_params::<wire::TargetsParams<wire::StreamTarget>>(
            r#"{"roomId": "r", "targets": [{"participantId": "a"}]}"#,
        )
        .unwrap_err();
        assert!(
            matches!(err, LiveError::InvalidParams { ref field, .. } if field == "targets[0].streamId"),
            "{err:?}"
        );
    }
}
