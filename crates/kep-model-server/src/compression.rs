//! Compressed calls, as each protocol's server takes them. Triton (`http_server.cc`,
//! `data_compressor.h`): a request body sent with `Content-Encoding: gzip` or `deflate`
//! (tritonclient's `request_compression_algorithm`) is inflated before it is read, within
//! the body limit; an answer is compressed in whichever of `gzip`, `deflate` and
//! `identity` the request's `Accept-Encoding` weighs highest (its
//! `response_compression_algorithm`, or any HTTP client's default).
//! `Inference-Header-Content-Length` counts the header uncompressed. TF Serving (`net_http`'s
//! `auto_uncompress_input`, on by default): a body whose `Content-Encoding` names gzip is
//! inflated; its answers are never compressed.

use std::io::{Read as _, Write as _};

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use flate2::Compression;
use flate2::read::{GzDecoder, ZlibDecoder};
use flate2::write::{GzEncoder, ZlibEncoder};

use crate::{Failure, MAX_BODY_BYTES};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Encoding {
    Identity,
    Gzip,
    Deflate,
}

impl Encoding {
    /// A request body's encoding.
    pub fn of_request(headers: &HeaderMap) -> Result<Encoding, Unsupported> {
        match headers
            .get(header::CONTENT_ENCODING)
            .map(HeaderValue::as_bytes)
        {
            None | Some(b"" | b"identity") => Ok(Encoding::Identity),
            Some(b"gzip") => Ok(Encoding::Gzip),
            Some(b"deflate") => Ok(Encoding::Deflate),
            Some(_) => Err(Unsupported),
        }
    }

    /// The encoding an answer is sent in: the highest weighed of Triton's three, by its
    /// reading of `Accept-Encoding` (a malformed entry or weight passed over, ties to the
    /// first).
    pub fn for_answer(headers: &HeaderMap) -> Encoding {
        let Some(accept) = headers
            .get(header::ACCEPT_ENCODING)
            .and_then(|v| v.to_str().ok())
        else {
            return Encoding::Identity;
        };
        let mut best = (Encoding::Identity, 0.0);
        for entry in accept.split(',') {
            let entry = entry.trim_start_matches(' ');
            let (name, weight) = match entry.split_once(";q=") {
                None => (entry, 1.0),
                Some(("", _)) => continue,
                Some((name, q)) => match stod(q) {
                    Some(q) => (name, q),
                    None => continue,
                },
            };
            let encoding = match name {
                "identity" => Encoding::Identity,
                "gzip" => Encoding::Gzip,
                "deflate" => Encoding::Deflate,
                _ => continue,
            };
            if weight > best.1 {
                best = (encoding, weight);
            }
        }
        best.0
    }

    /// Inflates a request `body`, refusing it in Triton's words past the body limit; zlib
    /// tells the two formats apart itself, as Triton lets it.
    pub fn inflate(body: &[u8]) -> Result<Vec<u8>, Failure> {
        let limit = MAX_BODY_BYTES as u64;
        let mut out = Vec::with_capacity(body.len().saturating_mul(2).min(MAX_BODY_BYTES));
        let read = if body.starts_with(&[0x1f, 0x8b]) {
            GzDecoder::new(body).take(limit + 1).read_to_end(&mut out)
        } else {
            ZlibDecoder::new(body).take(limit + 1).read_to_end(&mut out)
        };
        read.map_err(|e| {
            Failure::bad_request(format!("failed to decompress the request body: {e}"))
        })?;
        if out.len() > MAX_BODY_BYTES {
            return Err(Failure::bad_request(format!(
                "Decompressed data size exceeds the maximum allowed value of {MAX_BODY_BYTES} bytes."
            )));
        }
        Ok(out)
    }

    /// Its name in `Content-Encoding`; none for the identity.
    pub fn name(self) -> Option<&'static str> {
        match self {
            Encoding::Identity => None,
            Encoding::Gzip => Some("gzip"),
            Encoding::Deflate => Some("deflate"),
        }
    }

    /// `body` in this encoding, at zlib's default level as Triton's.
    pub fn compress(self, body: Vec<u8>) -> Vec<u8> {
        match self {
            Encoding::Identity => body,
            Encoding::Gzip => gzip(&body),
            Encoding::Deflate => deflate(&body),
        }
    }
}

/// A TF Serving request body as its server reads it: inflated when `Content-Encoding` names
/// gzip; one that does not inflate (within the body limit) is read as empty, as TF Serving's
/// server reads it, whose handler then answers for an empty body.
pub fn tf_serving_body(headers: &HeaderMap, body: Bytes) -> Bytes {
    let gzip = headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes().windows(4).any(|w| w == b"gzip"));
    if !gzip {
        return body;
    }
    Encoding::inflate(&body).map_or_else(|_| Bytes::new(), Bytes::from)
}

/// A request body in another encoding: Triton's 501, which says in `Accept-Encoding` which
/// it takes.
#[derive(Debug)]
pub struct Unsupported;

impl IntoResponse for Unsupported {
    fn into_response(self) -> Response {
        let mut refused = Failure::not_implemented("Unsupported compression type").into_response();
        refused.headers_mut().insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip, deflate"),
        );
        refused
    }
}

fn gzip(body: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::with_capacity(body.len() / 2), Compression::default());
    encoder.write_all(body).expect("writes to a Vec");
    encoder.finish().expect("writes to a Vec")
}

fn deflate(body: &[u8]) -> Vec<u8> {
    let mut encoder = ZlibEncoder::new(Vec::with_capacity(body.len() / 2), Compression::default());
    encoder.write_all(body).expect("writes to a Vec");
    encoder.finish().expect("writes to a Vec")
}

/// C++'s `std::stod` as Triton calls it on a weight: leading white space, a number, and
/// whatever follows ignored; none is an error.
fn stod(text: &str) -> Option<f64> {
    let s = text.trim_start();
    // The longest leading part that parses as a number, of the few a weight can have.
    (1..=s.len().min(32))
        .rev()
        .filter(|&n| s.is_char_boundary(n))
        .find_map(|n| s[..n].parse::<f64>().ok())
        .filter(|q| q.is_finite())
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    fn accept(value: &str) -> Encoding {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_str(value).unwrap(),
        );
        Encoding::for_answer(&headers)
    }

    #[test]
    fn answers_take_the_encoding_weighed_highest() {
        assert_eq!(Encoding::for_answer(&HeaderMap::new()), Encoding::Identity);
        assert_eq!(accept("gzip"), Encoding::Gzip);
        assert_eq!(accept("gzip, deflate"), Encoding::Gzip);
        assert_eq!(accept("gzip;q=0.5, deflate"), Encoding::Deflate);
        assert_eq!(accept("deflate;q=0.2,gzip;q=0.1"), Encoding::Deflate);
        assert_eq!(accept("br, zstd"), Encoding::Identity);
        assert_eq!(accept("identity, gzip"), Encoding::Identity);
        assert_eq!(accept("gzip;q=x, deflate;q=0.1"), Encoding::Deflate);
        assert_eq!(accept("gzip;q=0"), Encoding::Identity);
        assert_eq!(accept(";q=1, deflate;q=0.3abc"), Encoding::Deflate);
    }

    #[test]
    fn bodies_inflate_in_either_format_within_the_limit() {
        let body = br#"{"inputs": []}"#.repeat(100);
        assert_eq!(Encoding::inflate(&gzip(&body)).unwrap(), body);
        assert_eq!(Encoding::inflate(&deflate(&body)).unwrap(), body);
        let refused = Encoding::inflate(b"not zlib").unwrap_err();
        assert!(
            refused
                .message
                .starts_with("failed to decompress the request body")
        );
        // At the limit and a byte past it: zeros compress a thousandfold.
        let at = vec![0u8; MAX_BODY_BYTES];
        assert_eq!(Encoding::inflate(&gzip(&at)).unwrap().len(), MAX_BODY_BYTES);
        let over = vec![0u8; MAX_BODY_BYTES + 1];
        let refused = Encoding::inflate(&deflate(&over)).unwrap_err();
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            refused.message,
            "Decompressed data size exceeds the maximum allowed value of 67108864 bytes."
        );
    }

    #[test]
    fn other_request_encodings_are_refused_saying_which_are_taken() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("br"));
        let refused = Encoding::of_request(&headers).unwrap_err().into_response();
        assert_eq!(refused.status(), StatusCode::NOT_IMPLEMENTED);
        assert_eq!(refused.headers()[header::ACCEPT_ENCODING], "gzip, deflate");
        headers.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        assert_eq!(Encoding::of_request(&headers).unwrap(), Encoding::Identity);
    }
}
