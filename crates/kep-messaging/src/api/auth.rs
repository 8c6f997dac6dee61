//! The HTTP side of OAuth: where a request carries the client's credentials and its access
//! token, and the `accept` rule of every message call.

use axum::http::{HeaderMap, header};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::error::{MessagingError, OAuthError};

/// How the client authenticated; RFC 6749 §2.3 allows one method per request.
pub fn client_credentials(
    headers: &HeaderMap,
    form: &[(String, String)],
) -> Result<(String, String), OAuthError> {
    let field = |name: &str| form.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let from_form = match (field("client_id"), field("client_secret")) {
        (Some(id), Some(secret)) => Some((id, secret)),
        (None, None) => None,
        _ => {
            return Err(OAuthError::InvalidRequest(
                "client_id and client_secret go together",
            ));
        }
    };
    let from_header = match headers.get(header::AUTHORIZATION) {
        None => None,
        Some(value) => {
            let value = value.to_str().map_err(|_| OAuthError::InvalidClient)?;
            let rest =
                kep_core::http::credentials(value, "Basic").ok_or(OAuthError::InvalidClient)?;
            Some(match rest.split_once(' ') {
                // The service's own form: `Basic <client_id> <client_secret>`.
                Some((id, secret)) => (id.to_owned(), secret.trim().to_owned()),
                // RFC 6749 §2.3.1: base64 of `id:secret`, each form-urlencoded.
                None => {
                    let decoded = STANDARD
                        .decode(rest)
                        .map_err(|_| OAuthError::InvalidClient)?;
                    let text = String::from_utf8(decoded).map_err(|_| OAuthError::InvalidClient)?;
                    let (id, secret) = text.split_once(':').ok_or(OAuthError::InvalidClient)?;
                    (url_decode(id)?, url_decode(secret)?)
                }
            })
        }
    };
    match (from_header, from_form) {
        (Some(_), Some(_)) => Err(OAuthError::InvalidRequest(
            "use one client authentication method",
        )),
        (Some(c), None) | (None, Some(c)) => Ok(c),
        (None, None) => Err(OAuthError::InvalidClient),
    }
}

/// The form's (first) `grant_type`.
pub fn grant_type(form: &[(String, String)]) -> Option<&str> {
    form.iter()
        .find(|(k, _)| k == "grant_type")
        .map(|(_, v)| v.as_str())
}

/// Percent- and plus-decoding of one `application/x-www-form-urlencoded` value.
fn url_decode(s: &str) -> Result<String, OAuthError> {
    Ok(form_urlencoded::parse(format!("v={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default())
}

/// The access token of `Authorization: Bearer <token>`. `bare_ok` also takes the token
/// without the word (the seed's MMS upload example sends it so).
pub fn bearer(headers: &HeaderMap, bare_ok: bool) -> Result<&str, MessagingError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or(MessagingError::Unauthorized("Authorization is required"))?
        .to_str()
        .map_err(|_| MessagingError::Unauthorized("malformed Authorization"))?;
    match kep_core::http::credentials(value, "Bearer") {
        Some(t) => Ok(t),
        None if bare_ok && !value.contains(' ') => Ok(value.trim()),
        None => Err(MessagingError::Unauthorized(
            "expected Bearer <access token>",
        )),
    }
}

/// The `accept` rule of every message call: absent, or one that takes JSON.
pub fn check_accept(headers: &HeaderMap) -> Result<(), MessagingError> {
    let Some(accept) = headers.get(header::ACCEPT) else {
        return Ok(());
    };
    let accept = accept.to_str().unwrap_or("");
    let takes_json = accept.split(',').any(|r| {
        // Media types are case-insensitive (RFC 9110 §8.3.1).
        let media = r.split(';').next().unwrap_or("").trim();
        ["*/*", "application/*", "application/json"]
            .iter()
            .any(|m| media.eq_ignore_ascii_case(m))
    });
    if takes_json {
        Ok(())
    } else {
        Err(MessagingError::invalid(
            "accept",
            "must accept */* or application/json",
        ))
    }
}
