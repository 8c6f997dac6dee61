//! What the fuzz targets share: a runtime and a data dir to start a service in, a way to
//! send its real router one request, and the split of an input into a line and a body.

use std::sync::OnceLock;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use http_body_util::BodyExt as _;
use serde_json::Value;
use tower::ServiceExt as _;

/// Every target's allocator: the system's, refusing to hold more than 1 GiB. An input that
/// makes the code reserve memory out of proportion to its size (for a length or a shape it
/// declares) then fails as "memory allocation of N bytes failed", even when the pages would
/// never be touched, so that libFuzzer's limit on resident memory would not see them.
#[global_allocator]
static ALLOCATOR: cap::Cap<std::alloc::System> = cap::Cap::new(std::alloc::System, 1 << 30);

/// The process's one runtime. libFuzzer calls a target from one thread, and a
/// current-thread runtime keeps a run repeatable: the services' background tasks move only
/// while a call is driven.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// What a service is started from, with a new, empty data dir under the temp dir (it
/// outlives the process: `parsers.sh` points `TMPDIR` into its own work dir and removes
/// that); `public_url` is its listener's.
pub fn context(public_url: &str) -> kep_core::service::Context {
    let data_dir = tempfile::Builder::new()
        .prefix("kep-fuzz-")
        .tempdir()
        .expect("a temp dir")
        .keep();
    kep_core::service::Context {
        public_url: public_url.into(),
        ..kep_core::service::Context::standalone(&data_dir)
    }
}

/// An answer, whole.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    /// The body as JSON; every answer the targets look at is JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "{} answer is not JSON ({e}): {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// Sends `request` through `router`, as the listener would, and reads the whole answer.
pub fn call(router: &Router, request: Request<Body>) -> Answer {
    runtime().block_on(async {
        let response = router
            .clone()
            .oneshot(request)
            .await
            .expect("routers are infallible");
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .expect("answers are in memory")
            .to_bytes();
        Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    })
}

/// A JSON call made while setting a service up, which must answer `expect`.
pub fn setup_call(
    router: &Router,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    body: &Value,
    expect: StatusCode,
) -> Value {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Body::from(body.to_string()))
        .expect("a well-formed request");
    let answer = call(router, request);
    let json = answer.json();
    assert_eq!(answer.status, expect, "setup call {uri}: {json}");
    json
}

/// An input whose first line is a header value (a Content-Type, a length) or a list, and
/// whose rest is a body: the line without its `\n`, and the rest.
pub fn split_line(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[]),
    }
}

/// A multipart upload: `POST uri` with `headers`, an input's first line as its
/// Content-Type and the rest as its body. `None` when the line cannot be a header value
/// (no client could send it).
pub fn upload_request(uri: &str, headers: &[(&str, &str)], data: &[u8]) -> Option<Request<Body>> {
    let (content_type, body) = split_line(data);
    let content_type = HeaderValue::from_bytes(content_type).ok()?;
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header(header::CONTENT_TYPE, content_type);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    Some(
        request
            .body(Body::from(body.to_vec()))
            .expect("a well-formed request"),
    )
}

/// The messaging service, for its two upload calls.
pub mod messaging {
    use std::sync::LazyLock;

    use axum::Router;
    use axum::body::Body;
    use axum::http::{Method, Request, StatusCode, header};
    use base64::Engine as _;
    use kep_core::service::Service as _;
    use kep_messaging::{MessagingService, MessagingSettings};
    use serde_json::{Value, json};

    use crate::{call, context, runtime, setup_call};

    /// The messaging router, and `Authorization: Bearer <token>` of a client's token.
    pub static MESSAGING: LazyLock<(Router, String)> = LazyLock::new(|| {
        let service = runtime()
            .block_on(MessagingService::start(
                MessagingSettings::default(),
                &context("http://127.0.0.1:8803"),
            ))
            .expect("the messaging service starts");
        let client = setup_call(
            &service.admin_router(),
            Method::POST,
            "/admin/v1/messaging/clients",
            &[],
            &json!({"name": "fuzz"}),
            StatusCode::CREATED,
        );
        let basic = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            client["client_id"].as_str().expect("a client id"),
            client["client_secret"].as_str().expect("a client secret")
        ));
        let router = service.app().router;
        let token = call(
            &router,
            Request::builder()
                .method(Method::POST)
                .uri("/v2/oauth/token")
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .header(header::AUTHORIZATION, format!("Basic {basic}"))
                .body(Body::from("grant_type=client_credentials"))
                .expect("a well-formed request"),
        )
        .json();
        let token = token["access_token"].as_str().expect("an access token");
        (router, format!("Bearer {token}"))
    });

    /// Sends an upload input (`crate::upload_request`) to `uri` and checks the answer as CONTRACT §4
    /// words it: accepted 200 with code `200`, a file error 400 or 413 with `420`, a field
    /// error 400 with `410`; never a 5xx. Returns the answer's JSON.
    pub fn upload(uri: &str, data: &[u8]) -> Option<Value> {
        let (router, bearer) = &*MESSAGING;
        let request = crate::upload_request(uri, &[("authorization", bearer)], data)?;
        let answer = call(router, request);
        let json = answer.json();
        let code = json["code"].as_str().unwrap_or_default();
        let paired = matches!(
            (answer.status.as_u16(), code),
            (200, "200") | (400, "410" | "420") | (413, "420")
        );
        assert!(paired, "{} {json}", answer.status);
        assert_eq!(
            json["result"]["detail_code"].as_str(),
            Some(format!("API_{code}").as_str())
        );
        Some(json)
    }
}

/// A decoded input's shape, once its elements are seen to fill it. With no shared memory
/// registered it is decoded or lies in the request's body: never in a region.
pub fn filled_shape(name: &str, input: kep_model_server::model::Input) -> Vec<usize> {
    use kep_model_server::model::{Input, Place, TensorInPlace};
    if let Input::InPlace(TensorInPlace {
        place: Place::Slot(_),
        ..
    }) = input
    {
        panic!("{name}: in a shared memory region, though none is registered");
    }
    let tensor = input.into_tensor().expect("an input in the body decodes");
    assert_eq!(tensor.len(), tensor.shape().iter().product::<usize>(), "{name}");
    tensor.shape().to_vec()
}

/// The models the model-server decoders are given: what a request is read against.
pub mod models {
    use kep_model_server::{DataType, TensorSpec};

    fn spec(name: &str, datatype: DataType, shape: &[i64]) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            datatype,
            shape: shape.to_vec(),
        }
    }

    /// The inputs of a model of one input, `x`: FP32, a batch of pairs.
    pub fn one_input() -> Vec<TensorSpec> {
        vec![spec("x", DataType::Fp32, &[-1, 2])]
    }

    /// A model's inputs or outputs, one of every datatype, named by it (`fp32`, `bytes`,
    /// …): every element conversion is reachable by name.
    pub fn every_datatype() -> Vec<TensorSpec> {
        DataType::ALL
            .into_iter()
            .map(|d| spec(&d.name().to_lowercase(), d, &[-1]))
            .collect()
    }
}
