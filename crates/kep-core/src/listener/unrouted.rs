//! The answers hyper gives on its own, before any route sees the request: a head over the
//! listener's limit (431), a malformed head (400), a target too long (414). hyper writes
//! them with no body and offers no hook, so the connection recognises them as they are
//! written and sends in their place the same status with a body in the listener's API's
//! error shape ([`Unrouted`]).
//!
//! hyper answers so only with no response under way (`Writing::Init`), so such an answer is
//! one write of a head alone. A router's answer can look the same (an instance's empty 400
//! through the gateway): those are counted as the router gives them and let through.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Bytes;
use axum::http::StatusCode;

/// A listener's refusal body for `status`, saying `why`, in its API's error shape.
pub type Unrouted = fn(StatusCode, &str) -> serde_json::Value;

/// The operator API's shape, `{"error": {"code", "message"}}`: the admin listener's, and
/// the gateway's.
pub fn operator_shape(status: StatusCode, why: &str) -> serde_json::Value {
    let code = match status {
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "header_too_large",
        StatusCode::URI_TOO_LONG => "uri_too_long",
        StatusCode::MISDIRECTED_REQUEST => "misdirected_request",
        _ => "bad_request",
    };
    serde_json::json!({ "error": { "code": code, "message": why } })
}

/// One connection's watch over what hyper writes.
pub(super) struct Watch {
    pub(super) unrouted: Unrouted,
    /// The longest head the listener reads, for the 431's message.
    pub(super) max_head: usize,
    /// Answers the router gave that look like hyper's own and are not yet written.
    pub(super) lookalikes: Arc<AtomicUsize>,
}

impl Watch {
    /// Counts a router's answer that could be taken for one of hyper's own.
    pub(super) fn routed(lookalikes: &AtomicUsize, status: StatusCode, empty: bool) {
        if empty && automatic_status(status) {
            lookalikes.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// What goes out instead of `written`, when it is hyper's own refusal.
    pub(super) fn replace(&self, written: &[u8]) -> Option<Bytes> {
        let status = hyper_refusal(written)?;
        // A router's lookalike is written before anything hyper adds after it.
        if self
            .lookalikes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
        {
            return None;
        }
        let why = match status {
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => {
                format!("the request head is over {} bytes", self.max_head)
            }
            StatusCode::URI_TOO_LONG => "the request target is too long".to_owned(),
            _ => "the request head is malformed".to_owned(),
        };
        let body = (self.unrouted)(status, &why).to_string();
        let date = header_line(written, "date");
        let answer = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n{date}\r\n{body}",
            status.as_str(),
            status.canonical_reason().unwrap_or(""),
            body.len(),
        );
        Some(Bytes::from(answer))
    }
}

fn automatic_status(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::BAD_REQUEST
            | StatusCode::URI_TOO_LONG
            | StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
    )
}

/// The status of `written` when it is a whole head, alone, with an empty body, of a status
/// hyper answers on its own.
fn hyper_refusal(written: &[u8]) -> Option<StatusCode> {
    let rest = written.strip_prefix(b"HTTP/1.1 ")?;
    let status = StatusCode::from_bytes(rest.get(..3)?).ok()?;
    if !automatic_status(status) {
        return None;
    }
    let head_end = written.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let empty =
        header_line(written, "content-length").eq_ignore_ascii_case("content-length: 0\r\n");
    (head_end == written.len() && empty).then_some(status)
}

/// The line of header `name` in a head, with its line end; empty when there is none.
fn header_line<'a>(head: &'a [u8], name: &str) -> &'a str {
    let head = std::str::from_utf8(head).unwrap_or("");
    head.split_inclusive("\r\n")
        .skip(1)
        .find(|line| {
            line.split_once(':')
                .is_some_and(|(n, _)| n.eq_ignore_ascii_case(name))
        })
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch() -> Watch {
        Watch {
            unrouted: operator_shape,
            max_head: 8192,
            lookalikes: Arc::default(),
        }
    }

    const HYPER_431: &[u8] =
        b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\
        date: Fri, 27 Nov 2026 05:00:00 GMT\r\n\r\n";

    #[test]
    fn hypers_own_refusal_gets_a_body_and_keeps_its_date() {
        let answer = watch().replace(HYPER_431).unwrap();
        let answer = std::str::from_utf8(&answer).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(
            head.contains("\r\ndate: Fri, 27 Nov 2026 05:00:00 GMT"),
            "{head}"
        );
        assert!(head.contains(&format!("\r\ncontent-length: {}", body.len())));
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["error"]["code"], "header_too_large");
    }

    #[test]
    fn a_routers_lookalike_and_anything_else_go_out_as_written() {
        let w = watch();
        Watch::routed(
            &w.lookalikes,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            true,
        );
        Watch::routed(&w.lookalikes, StatusCode::NOT_FOUND, true);
        Watch::routed(&w.lookalikes, StatusCode::BAD_REQUEST, false);
        assert!(w.replace(HYPER_431).is_none(), "the router's own");
        assert!(w.replace(HYPER_431).is_some(), "hyper's, after it");
        let with_body = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\n\r\n";
        let head_and_more = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\nHTTP/1.1";
        let not_a_head = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n";
        for written in [&with_body[..], head_and_more, not_a_head, b"{}"] {
            assert!(w.replace(written).is_none());
        }
    }
}
