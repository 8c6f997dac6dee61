//! The gateway's one error enum, mapped once onto the operator error shape
//! `{"error": {"code", "message"}}` that the management API answers in too (CONTRACT §3),
//! and onto the shapes the model servers' clients read: `{"error": "…"}` on the KServe v2
//! and TF Serving paths, a gRPC status on gRPC calls.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kep_core::http::ApiError;
use kep_core::limits::Refusal;
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A path outside `/endpoints/{endpoint}/{path}`.
    #[error("{0}")]
    NotFound(String),
    #[error("request body is over {0} bytes")]
    PayloadTooLarge(u64),
    /// An endpoint call without the endpoint's API key (or to an unknown endpoint: names
    /// are not disclosed).
    #[error("no endpoint of this name accepts this API key")]
    Unauthorized,
    #[error("endpoint {0} has no ready instance")]
    NoReadyInstance(String),
    /// The instance could not be reached or broke off its answer.
    #[error("{0}")]
    BadGateway(String),
    #[error("the instance did not answer within {0} s")]
    GatewayTimeout(u64),
    /// A request body that could not be read, or a path that is not one.
    #[error("{0}")]
    BadRequest(String),
    /// Over the endpoint's (or, without its key, the peer's) rate or calls in flight.
    #[error(transparent)]
    TooManyRequests(#[from] Refusal),
    /// Spooling a large body to disk failed.
    #[error("internal error")]
    Internal(#[from] std::io::Error),
}

impl From<GatewayError> for ApiError {
    fn from(e: GatewayError) -> Self {
        let message = e.to_string();
        let (status, code) = match e {
            GatewayError::Internal(e) => return ApiError::internal(e),
            GatewayError::TooManyRequests(refusal) => return ApiError::from(refusal),
            GatewayError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            GatewayError::PayloadTooLarge(_) => {
                (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
            }
            GatewayError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            GatewayError::NoReadyInstance(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "no_ready_instance")
            }
            GatewayError::BadGateway(_) => (StatusCode::BAD_GATEWAY, "bad_gateway"),
            GatewayError::GatewayTimeout(_) => (StatusCode::GATEWAY_TIMEOUT, "gateway_timeout"),
            GatewayError::BadRequest(_) => (StatusCode::BAD_REQUEST, "invalid_body"),
        };
        ApiError::new(status, code, message)
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        self.answer(Shape::Operator)
    }
}

/// The shape of the gateway's own answer to a call, by what the caller speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Operator,
    /// KServe v2 (`/v2…`) and TF Serving (`/v1/…`): `tritonclient` cannot read another.
    Protocol,
    /// A gRPC call (`application/grpc…`): HTTP 200 with `grpc-status` and `grpc-message`.
    Grpc,
}

impl Shape {
    /// The shape for a call of `content_type` to `path` on the instance.
    pub fn of(content_type: Option<&[u8]>, path: &str) -> Shape {
        if content_type.is_some_and(|t| t.starts_with(b"application/grpc")) {
            Shape::Grpc
        } else if path == "/v2" || path.starts_with("/v2/") || path.starts_with("/v1/") {
            Shape::Protocol
        } else {
            Shape::Operator
        }
    }
}

impl GatewayError {
    /// The HTTP status of the error, as the meters count it whatever the shape.
    pub fn status(&self) -> StatusCode {
        match self {
            GatewayError::NotFound(_) => StatusCode::NOT_FOUND,
            GatewayError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            GatewayError::Unauthorized => StatusCode::UNAUTHORIZED,
            GatewayError::NoReadyInstance(_) => StatusCode::SERVICE_UNAVAILABLE,
            GatewayError::BadGateway(_) => StatusCode::BAD_GATEWAY,
            GatewayError::GatewayTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            GatewayError::BadRequest(_) => StatusCode::BAD_REQUEST,
            GatewayError::TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
            GatewayError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The gRPC status code of the error (`grpc-status`).
    fn grpc_code(&self) -> u16 {
        match self {
            // UNIMPLEMENTED: no such method here.
            GatewayError::NotFound(_) => 12,
            GatewayError::PayloadTooLarge(_) | GatewayError::TooManyRequests(_) => 8,
            GatewayError::Unauthorized => 16,
            GatewayError::NoReadyInstance(_) | GatewayError::BadGateway(_) => 14,
            GatewayError::GatewayTimeout(_) => 4,
            GatewayError::BadRequest(_) => 3,
            GatewayError::Internal(_) => 13,
        }
    }

    pub fn answer(self, shape: Shape) -> Response {
        let unauthorized = matches!(self, GatewayError::Unauthorized);
        let grpc_code = self.grpc_code();
        let api = ApiError::from(self);
        let message = api.detail.message.clone();
        let mut res = api.into_response();
        if unauthorized {
            res.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        match shape {
            Shape::Operator => {}
            Shape::Protocol => {
                *res.body_mut() = Body::from(serde_json::json!({ "error": message }).to_string());
            }
            Shape::Grpc => {
                // Trailers-only: the status rides in the headers of an empty answer.
                *res.status_mut() = StatusCode::OK;
                *res.body_mut() = Body::empty();
                let headers = res.headers_mut();
                headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/grpc"),
                );
                headers.insert("grpc-status", HeaderValue::from(grpc_code));
                let encoded = utf8_percent_encode(&message, GRPC_MESSAGE).to_string();
                if let Ok(v) = HeaderValue::try_from(encoded) {
                    headers.insert("grpc-message", v);
                }
            }
        }
        res
    }
}

/// `grpc-message` is percent-encoded: everything but printable ASCII other than `%`.
const GRPC_MESSAGE: &AsciiSet = &CONTROLS.add(b'%');

/// Why a call did not get an answer.
#[derive(Debug)]
pub struct SendError {
    /// No connection could be made: the call never reached the instance.
    pub connect: bool,
    pub cause: String,
}

impl SendError {
    pub(crate) fn connect(e: std::io::Error) -> Self {
        SendError {
            connect: true,
            cause: format!("connecting: {e}"),
        }
    }

    pub fn closed() -> Self {
        SendError {
            connect: false,
            cause: "the instance closed the connection".into(),
        }
    }

    /// The innermost cause of `e`, which says what went wrong in the fewest words.
    pub fn http(e: &(dyn std::error::Error + 'static)) -> Self {
        let mut cause = e;
        while let Some(next) = cause.source() {
            cause = next;
        }
        SendError {
            connect: false,
            cause: cause.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;

    use super::*;

    async fn body(res: Response) -> String {
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn the_shape_follows_the_protocol_of_the_call() {
        let grpc = Some(&b"application/grpc+proto"[..]);
        assert_eq!(
            Shape::of(grpc, "/inference.GRPCInferenceService/ModelInfer"),
            Shape::Grpc
        );
        for path in ["/v2", "/v2/models/m/infer", "/v1/models/m:predict"] {
            assert_eq!(
                Shape::of(Some(b"application/json"), path),
                Shape::Protocol,
                "{path}"
            );
        }
        for path in ["/", "/v2x", "/predict", "/v1"] {
            assert_eq!(Shape::of(None, path), Shape::Operator, "{path}");
        }
    }

    #[tokio::test]
    async fn each_shape_says_the_same_error() {
        let res = GatewayError::Unauthorized.answer(Shape::Protocol);
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(res.headers()[header::WWW_AUTHENTICATE], "Bearer");
        assert_eq!(
            body(res).await,
            r#"{"error":"no endpoint of this name accepts this API key"}"#
        );

        let res = GatewayError::NoReadyInstance("e1".into()).answer(Shape::Grpc);
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()["grpc-status"], "14");
        assert_eq!(
            res.headers()["grpc-message"],
            "endpoint e1 has no ready instance"
        );
        assert_eq!(body(res).await, "");
        let res = GatewayError::BadGateway("50% broken\n".into()).answer(Shape::Grpc);
        assert_eq!(res.headers()["grpc-message"], "50%25 broken%0A");

        let res = GatewayError::GatewayTimeout(60).answer(Shape::Operator);
        assert_eq!(res.status(), StatusCode::GATEWAY_TIMEOUT);
        assert!(body(res).await.contains(r#""code":"gateway_timeout""#));
    }
}
