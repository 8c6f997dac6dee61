//! The wire of every kep API: request and answer bodies, error bodies and their OpenAPI
//! schemas, one module per service. Servers, the typed client and the CLI share these
//! types; nothing here knows a server framework or a database, so a client links only
//! serde and utoipa.

pub mod activity;
pub mod adapter;
pub mod declared;
pub mod live;
pub mod messaging;
pub mod operator;
pub mod readiness;
pub mod serving;
pub mod whole;

/// One path segment, percent-encoded: a name with `/`, `?`, `#`, `%` or a space stays one
/// segment and reaches the server as it was given (RFC 3986 unreserved characters pass).
pub fn seg(s: &str) -> percent_encoding::PercentEncode<'_> {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC};
    const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(s, SEGMENT)
}

/// A route path of `kep_api`'s `paths` with its `{name}` parameters filled in order, each
/// percent-encoded as one segment.
pub fn path(template: &str, args: &[&str]) -> String {
    let mut out = String::with_capacity(template.len() + 16);
    let mut args = args.iter();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let close = open + rest[open..].find('}').expect("a path parameter is closed");
        out.push_str(&rest[..open]);
        let arg = args.next().expect("an argument for each path parameter");
        out.extend(seg(arg));
        rest = &rest[close + 1..];
    }
    assert!(args.next().is_none(), "more arguments than path parameters");
    out.push_str(rest);
    out
}
