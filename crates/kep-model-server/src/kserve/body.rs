//! An inference request's body, read so that its binary tensor data (after the JSON header
//! of `Inference-Header-Content-Length` bytes) starts on a 64-byte boundary: an input there
//! is aligned for its elements, and ONNX Runtime reads it where it lies rather than from a
//! copy (a batch of 32 images is 19 MB).

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;

use super::HEADER_LENGTH;
use crate::compression::Encoding;
use crate::{Failure, MAX_BODY_BYTES};

/// Any element's size divides it, and it is a cache line.
const ALIGN: usize = 64;

/// The body of an inference request, at most [`MAX_BODY_BYTES`], inflated when it came
/// compressed (`compression`).
pub struct InferBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for InferBody {
    type Rejection = Response;

    async fn from_request(req: Request, _: &S) -> Result<Self, Response> {
        let encoding = Encoding::of_request(req.headers()).map_err(IntoResponse::into_response)?;
        let declared = length(req.headers().get(header::CONTENT_LENGTH));
        if declared.is_some_and(|n| n > MAX_BODY_BYTES) {
            return Err(too_large().into_response());
        }
        let head = length(req.headers().get(HEADER_LENGTH)).unwrap_or(0);
        // A compressed body is gathered as it came, and aligned once inflated.
        let gathered_head = if encoding == Encoding::Identity {
            head
        } else {
            0
        };
        let mut body = Aligned::new(gathered_head, declared.unwrap_or(0));
        let mut stream = req.into_body().into_data_stream();
        while let Some(data) = stream.next().await {
            let data = data.map_err(|e| {
                Failure::bad_request(format!("reading the request body: {e}")).into_response()
            })?;
            if !body.push(&data) {
                return Err(too_large().into_response());
            }
        }
        let body = body.done();
        if encoding == Encoding::Identity {
            return Ok(InferBody(body));
        }
        let inflated = Encoding::inflate(&body).map_err(IntoResponse::into_response)?;
        let mut aligned = Aligned::new(head, inflated.len());
        aligned.push(&inflated);
        Ok(InferBody(aligned.done()))
    }
}

/// Bytes gathered with room before them, so that their first `head` bytes end on a
/// boundary.
struct Aligned {
    buf: Vec<u8>,
    pad: usize,
}

impl Aligned {
    fn new(head: usize, capacity: usize) -> Aligned {
        let mut buf = Vec::with_capacity(capacity + ALIGN);
        // Bytes of no known length may move the buffer as it grows: their tensors are then
        // copied, as unaligned ones are.
        let pad = (ALIGN - (buf.as_ptr() as usize).wrapping_add(head) % ALIGN) % ALIGN;
        buf.resize(pad, 0);
        Aligned { buf, pad }
    }

    /// Whether `data` fits under the limit (and was added).
    fn push(&mut self, data: &[u8]) -> bool {
        let fits = self.buf.len() - self.pad + data.len() <= MAX_BODY_BYTES;
        if fits {
            self.buf.extend_from_slice(data);
        }
        fits
    }

    fn done(self) -> Bytes {
        Bytes::from(self.buf).slice(self.pad..)
    }
}

/// A length header's value, if it is one.
pub(super) fn length(value: Option<&HeaderValue>) -> Option<usize> {
    value?.to_str().ok()?.trim().parse().ok()
}

fn too_large() -> Failure {
    Failure::payload_too_large(format!(
        "the request body is larger than {MAX_BODY_BYTES} bytes"
    ))
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::StatusCode;
    use axum::response::IntoResponse as _;

    use super::*;
    use crate::kserve::decode;
    use crate::model::{Input, Place, TensorInPlace};
    use crate::shm::SharedMemory;

    async fn read(
        head: Option<usize>,
        declared: Option<usize>,
        body: Body,
    ) -> Result<Bytes, StatusCode> {
        let mut req = Request::post("/v2/models/m/infer");
        if let Some(n) = head {
            req = req.header(HEADER_LENGTH, n);
        }
        if let Some(n) = declared {
            req = req.header(header::CONTENT_LENGTH, n);
        }
        match InferBody::from_request(req.body(body).unwrap(), &()).await {
            Ok(InferBody(bytes)) => Ok(bytes),
            Err(e) => Err(e.into_response().status()),
        }
    }

    #[tokio::test]
    async fn binary_data_starts_aligned_and_is_read_in_place() {
        // Headers of each length modulo 4, and past a boundary.
        for spaces in [0, 1, 2, 3, 61] {
            let json = format!(
                r#"{{"inputs":[{{"name":"x","shape":[2],"datatype":"FP32","parameters":{{"binary_data_size":8}}}}]}}{}"#,
                " ".repeat(spaces)
            );
            let n = json.len();
            let mut body = json.into_bytes();
            body.extend(1f32.to_le_bytes().into_iter().chain(2f32.to_le_bytes()));
            let got = read(Some(n), None, Body::from(body.clone())).await.unwrap();
            assert_eq!(got, body, "no length declared");
            let got = read(Some(n), Some(body.len()), Body::from(body.clone()))
                .await
                .unwrap();
            assert_eq!(got, body);
            assert_eq!((got.as_ptr() as usize + n) % ALIGN, 0, "header of {n}");
            let header = axum::http::HeaderValue::from(n);
            let decoded = decode("m", &[], &SharedMemory::new(false), Some(&header), &got);
            let Ok(mut decoded) = decoded else {
                panic!("decoded")
            };
            let Some((_, Input::InPlace(TensorInPlace { place, .. }))) = decoded.inputs.pop()
            else {
                panic!("x is read where it lies")
            };
            assert!(matches!(place, Place::Body(b) if b == body[n..]));
        }
    }

    #[tokio::test]
    async fn a_compressed_body_is_inflated_aligned_and_its_length_header_counts_it_inflated() {
        use std::io::Write as _;
        let json = r#"{"inputs":[{"name":"x","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}}]}"#;
        let n = json.len();
        let mut body = json.as_bytes().to_vec();
        body.extend(1f32.to_le_bytes().into_iter().chain(2f32.to_le_bytes()));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&body).unwrap();
        let compressed = gz.finish().unwrap();
        let req = Request::post("/v2/models/m/infer")
            .header(HEADER_LENGTH, n)
            .header(header::CONTENT_ENCODING, "gzip")
            .header(header::CONTENT_LENGTH, compressed.len())
            .body(Body::from(compressed))
            .unwrap();
        let Ok(InferBody(got)) = InferBody::from_request(req, &()).await else {
            panic!("inflated")
        };
        assert_eq!(got, body);
        assert_eq!((got.as_ptr() as usize + n) % ALIGN, 0);
        let header = axum::http::HeaderValue::from(n);
        let decoded = decode("m", &[], &SharedMemory::new(false), Some(&header), &got);
        let Ok(mut decoded) = decoded else {
            panic!("decoded")
        };
        assert!(matches!(
            decoded.inputs.pop(),
            Some((
                _,
                Input::InPlace(TensorInPlace {
                    place: Place::Body(_),
                    ..
                })
            ))
        ));
    }

    #[tokio::test]
    async fn bodies_past_the_limit_are_refused_in_the_error_shape() {
        let declared_over = Request::post("/v2/models/m/infer")
            .header(header::CONTENT_LENGTH, MAX_BODY_BYTES + 1)
            .body(Body::empty())
            .unwrap();
        let e = InferBody::from_request(declared_over, &())
            .await
            .err()
            .unwrap();
        let res = e.into_response();
        assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let body = axum::body::to_bytes(res.into_body(), 1024).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"], "the request body is larger than 67108864 bytes");
        // Sent without a length, in pieces: at the limit it is read, past it refused.
        let pieces = |n: usize| {
            let piece = Bytes::from(vec![0u8; 1 << 20]);
            let mut pieces = vec![piece.clone(); n / piece.len()];
            pieces.push(Bytes::from(vec![0u8; n % piece.len()]));
            Body::from_stream(futures_util::stream::iter(
                pieces.into_iter().map(Ok::<_, std::io::Error>),
            ))
        };
        let at = read(None, None, pieces(MAX_BODY_BYTES)).await.unwrap();
        assert_eq!(at.len(), MAX_BODY_BYTES);
        assert_eq!(
            read(None, None, pieces(MAX_BODY_BYTES + 1)).await,
            Err(StatusCode::PAYLOAD_TOO_LARGE)
        );
        assert_eq!(
            read(Some(2), Some(2), Body::from("{}")).await.unwrap(),
            "{}"
        );
    }
}
