//! The host names a listener answers to. A page on any site can point a name of its own at
//! 127.0.0.1 (DNS rebinding) and then read, as same-origin, whatever a listener there
//! answers without a token; its requests carry that name as their `Host`, so a listener
//! that answers only its own names gives such a page nothing.

use std::net::IpAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::uri::Authority;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::Unrouted;

/// A listener's own host names: any IP address (a rebinding needs a name), `localhost` and
/// the names under it (the loopback's, RFC 6761), and those it is given.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts {
    /// Lowercase, without a trailing dot.
    names: Arc<[String]>,
    /// `*` was given: every host is allowed.
    any: bool,
}

impl AllowedHosts {
    /// The defaults and `names` (case-insensitive; `*` allows any host).
    pub fn new<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Self {
        let names: Vec<String> = names
            .into_iter()
            .map(|n| normalised(n.as_ref().trim()))
            .filter(|n| !n.is_empty())
            .collect();
        AllowedHosts {
            any: names.iter().any(|n| n == "*"),
            names: names.into(),
        }
    }

    /// Whether `host` (a `Host` value's host: a name, an IPv4 address or a bracketed IPv6
    /// one) is one of the listener's.
    pub fn allows(&self, host: &str) -> bool {
        let unbracketed = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if self.any || unbracketed.parse::<IpAddr>().is_ok() {
            return true;
        }
        let name = normalised(host);
        name == "localhost" || name.ends_with(".localhost") || self.names.contains(&name)
    }

    /// `router` answering only requests to its own hosts, before any route or token check
    /// sees them: any other is 421 Misdirected Request (a malformed `Host` 400), worded by
    /// `shape`. A request that names no host (HTTP/1.0) is no browser's, and passes.
    pub fn guard(self, router: Router, shape: Unrouted) -> Router {
        router.layer(axum::middleware::from_fn_with_state(
            (self, shape),
            refuse_foreign_hosts,
        ))
    }
}

fn normalised(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

async fn refuse_foreign_hosts(
    State((hosts, shape)): State<(AllowedHosts, Unrouted)>,
    req: Request,
    next: Next,
) -> Response {
    // HTTP/2's `:authority`, and an absolute-form target's, come before `Host` (RFC 9112
    // §3.2.2).
    let named = match req.uri().authority() {
        Some(authority) => Some(Ok(authority.clone())),
        None => req
            .headers()
            .get(header::HOST)
            .map(|v| Authority::try_from(v.as_bytes())),
    };
    let (status, why) = match named {
        None => return next.run(req).await,
        Some(Ok(authority)) if hosts.allows(authority.host()) => return next.run(req).await,
        Some(Ok(authority)) => (
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "this listener does not answer to the host {}; its allowed_hosts setting \
                 names those it does",
                authority.host()
            ),
        ),
        Some(Err(_)) => (
            StatusCode::BAD_REQUEST,
            "the Host header is malformed".into(),
        ),
    };
    (status, axum::Json(shape(status, &why))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_localhost_and_the_given_names_are_allowed() {
        let hosts = AllowedHosts::new(["Kep.Example.", " "]);
        for host in [
            "127.0.0.1",
            "10.1.2.3",
            "[::1]",
            "[2001:db8::1]",
            "localhost",
            "LOCALHOST.",
            "app.localhost",
            "kep.example",
            "KEP.example.",
        ] {
            assert!(hosts.allows(host), "{host}");
        }
        for host in [
            "evil.example",
            "example",
            "kep.example.evil",
            "localhost.evil",
            "[evil]",
            "",
        ] {
            assert!(!hosts.allows(host), "{host}");
        }
        assert!(AllowedHosts::new(["*"]).allows("evil.example"));
        assert!(!AllowedHosts::default().allows("kep.example"));
    }
}
