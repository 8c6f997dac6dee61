//! The dlr-url of an HTTP carrier ([`crate::carriers::http`]): the gateway sends each
//! delivery receipt here, as a form (POST) or a query (GET), with the token kep gave it.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::MessagingService;
use crate::carriers::{CarrierReceipt, MessageState};

/// `GET|POST /carriers/{name}/dlr?token=…`: a delivery receipt from an HTTP carrier.
/// Jasmin's receipt fields: `id` (the id `/send` answered), `message_status` (the receipt's
/// state word) and `level` (1: the SMSC took it, an acknowledgement with no state; 2: the
/// handset's receipt).
#[utoipa::path(method(get, post), path = crate::carriers::http::DLR_PATH,
    params(("name" = String, Path, description = "the carrier's name"),
           ("token" = String, Query, description = "the token of the dlr-url kep gave the carrier (`<period>.<mac>`; it changes each hour and is refused once no receipt is awaited for it)"),
           ("id" = Option<String>, Query, description = "the message id `/send` answered (or in the form)"),
           ("message_status" = Option<String>, Query, description = "the receipt's state: DELIVRD, ACCEPTD, UNDELIV, REJECTD, EXPIRED, DELETED, UNKNOWN"),
           ("level" = Option<String>, Query, description = "1: the SMSC took it (no state); 2 or 3: the handset's receipt")),
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "the same fields as a form"),
    responses((status = 200, description = "taken (`ACK/Jasmin`)", body = String, content_type = "text/plain"),
              (status = 400, description = "no `id`", body = String, content_type = "text/plain"),
              (status = 403, description = "a wrong or expired token, or no HTTP carrier of that name: one answer for all", body = String, content_type = "text/plain")))]
pub(crate) async fn carrier_dlr(
    State(m): State<MessagingService>,
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    // Read as a form whatever its Content-Type says (or without one): a gateway's receipt
    // is not refused for how it labels it.
    form: Bytes,
) -> Response {
    let token = query.get("token").map_or("", String::as_str);
    let checked = match m.0.dispatcher.carrier().http(&name) {
        Some((carrier, http)) => http.check_token(token).map(|()| carrier),
        None => Err("no HTTP carrier of that name"),
    };
    let carrier = match checked {
        Ok(carrier) => carrier,
        // One answer whatever was wrong: it tells no one which carriers exist.
        Err(why) => {
            tracing::info!(carrier = ?name, why, "a carrier receipt refused");
            return (StatusCode::FORBIDDEN, "forbidden").into_response();
        }
    };
    let mut fields: HashMap<String, String> = form_urlencoded::parse(&form).into_owned().collect();
    for (k, v) in query {
        fields.entry(k).or_insert(v);
    }
    let Some(id) = fields.get("id").filter(|id| !id.is_empty()) else {
        return (StatusCode::BAD_REQUEST, "no id").into_response();
    };
    let status = fields
        .get("message_status")
        .map(String::as_str)
        .unwrap_or_default();
    if fields.get("level").map(String::as_str) != Some("1") {
        match MessageState::from_stat(status) {
            Some(state) => {
                let _ = m.0.receipts.send(CarrierReceipt {
                    carrier: carrier.clone(),
                    // Its own dlr-url: an HTTP carrier is an account alone.
                    account: carrier.clone(),
                    message_id: id.clone(),
                    state,
                });
            }
            None => {
                tracing::warn!(carrier = %name, id, status, "a receipt in a state kep does not know: dropped")
            }
        }
    }
    // What Jasmin waits for; anything else it sends again.
    "ACK/Jasmin".into_response()
}
