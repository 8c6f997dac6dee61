//! The adapter's headers (CONTRACT §2), read by the functions its handlers read them with:
//! `credentials` (`Authorization: Secret <key>`, `Kep-OrgLoginType: ID <id>`),
//! `drm_headers` (those, `Kep-AgentSession: DSID <session>` and `Kep-File-Id`) and
//! `file_type` (`Kep-File-Type`). The input is header lines, `Name: value`; a line that
//! cannot be a header is left out, as no client could send it.
#![no_main]

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use kep_adapter::api::{credentials, drm_headers, file_type};
use libfuzzer_sys::fuzz_target;

/// The scheme word of `Authorization`, the setting's default.
const SCHEME: &str = "Secret";

fn headers(data: &[u8]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for line in data.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii_start());
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        {
            headers.append(name, value);
        }
    }
    headers
}

/// A value read from a header is trimmed, not empty, and part of the header's first value.
fn check_value(headers: &HeaderMap, name: &str, value: &str) {
    assert!(!value.is_empty());
    assert_eq!(value, value.trim());
    let header = headers[name].to_str().expect("a value read is text");
    assert!(header.contains(value), "{name}: {header:?} gave {value:?}");
}

fuzz_target!(|data: &[u8]| {
    let headers = headers(data);
    let creds = credentials(&headers, SCHEME);
    if let Ok((org_id, key)) = creds {
        check_value(&headers, "authorization", key);
        // The id is the digits the header gives: `ID <id>`, a non-negative integer.
        let id = headers["kep-orglogintype"].to_str().expect("text");
        assert!(org_id >= 0, "{id:?}");
        let digits = id.strip_prefix("ID ").map(str::trim);
        assert!(
            digits.is_some_and(|d| d.bytes().all(|b| b.is_ascii_digit())),
            "{id:?}"
        );
    }
    match drm_headers(&headers, SCHEME) {
        Ok(call) => {
            // The credentials are read first, as `credentials` reads them.
            assert_eq!(creds.as_ref().ok(), Some(&call.credentials));
            check_value(&headers, "kep-agentsession", call.session);
            check_value(&headers, "kep-file-id", call.file_id);
        }
        Err(e) => {
            // A header missing or malformed is a 400, whichever it is.
            assert_eq!(e.status().as_u16(), 400, "{e}");
        }
    }
    if let Err(e) = file_type(&headers) {
        assert_eq!(e.status().as_u16(), 400, "{e}");
    }
});
