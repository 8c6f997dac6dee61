//! What of a call's headers reaches an instance, and the key a call must carry: both paths
//! of the gateway (hyper's and the fast path, [`crate::h1`]) ask these.

use std::net::IpAddr;

use axum::http::{HeaderMap, HeaderValue, header};

/// Whether an `Authorization` value is `Bearer` and the endpoint's key; both paths of the
/// gateway ask it.
pub(crate) fn authorized(authorization: Option<&[u8]>, key_hash: &[u8; 32]) -> bool {
    authorization
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| kep_core::http::credentials(v, "Bearer"))
        // Digests are compared: timing can tell nothing about the key itself.
        .is_some_and(|key| kep_core::secret::sha256(key) == *key_hash)
}

const X_FORWARDED_FOR: header::HeaderName = header::HeaderName::from_static("x-forwarded-for");

/// Headers that belong to one connection, not to the request (RFC 9110 §7.6.1).
pub(crate) const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

pub(crate) fn is_hop_by_hop(name: &[u8]) -> bool {
    HOP_BY_HOP
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h.as_bytes()))
}

/// A header name with an underscore does not reach an instance, as nginx drops it
/// (`underscores_in_headers off`): a backend that reads `_` as `-` (CGI's naming, WSGI's)
/// would take `Content_Length` or `Transfer_Encoding` for the framing headers.
pub(crate) fn underscored(name: &[u8]) -> bool {
    name.contains(&b'_')
}

/// Whether a header says where a call came from or how it reached kep (`Forwarded`,
/// `X-Forwarded-*`, `X-Real-IP`): an instance that trusts them would take a caller's word
/// for it, so none passes as sent; the gateway writes `X-Forwarded-For` itself.
pub(crate) fn is_forwarding(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"forwarded")
        || name.eq_ignore_ascii_case(b"x-real-ip")
        || name
            .get(..12)
            .is_some_and(|p| p.eq_ignore_ascii_case(b"x-forwarded-"))
}

/// The caller's headers, less the hop-by-hop ones, the forwarding ones, `Host` and the API
/// key (which is the platform's, not the instance's); `X-Forwarded-For` the caller's
/// address, `peer`; `length`, the body's as held, if any.
pub(crate) fn upstream_headers(
    mut headers: HeaderMap,
    length: Option<u64>,
    peer: IpAddr,
) -> HeaderMap {
    headers.remove(header::CONTENT_LENGTH);
    // `TE: trailers` is end to end (gRPC needs it); headers `Connection` names are not.
    let te_trailers = headers.get(header::TE).is_some_and(|v| v == "trailers");
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .collect();
    for name in named {
        headers.remove(name.as_str());
    }
    for name in HOP_BY_HOP {
        headers.remove(*name);
    }
    let dropped: Vec<_> = headers
        .keys()
        .filter(|n| underscored(n.as_str().as_bytes()) || is_forwarding(n.as_str().as_bytes()))
        .cloned()
        .collect();
    for name in dropped {
        headers.remove(name);
    }
    let peer = HeaderValue::try_from(peer.to_string()).expect("an address is a header value");
    headers.insert(X_FORWARDED_FOR, peer);
    if te_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
    headers.remove(header::HOST);
    headers.remove(header::AUTHORIZATION);
    if let Some(length) = length {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
    headers
}
