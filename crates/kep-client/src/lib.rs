//! A typed client for the kep APIs: what the `kep` CLI and the tests speak.

pub mod activity;
pub mod adapter;
pub mod live;
pub mod messaging;
pub mod readiness;
pub mod serving;
pub mod tls;

pub(crate) use kep_api::path;

/// What a call through this client can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("HTTP: {0}")]
    Http(#[from] reqwest::Error),
    /// A REST answer other than 2xx, with its body.
    #[error("HTTP {status}: {body}")]
    Api { status: u16, body: String },
    /// A JSON-RPC `error`.
    #[error("JSON-RPC error {}: {} {}", .0.code, .0.message, .0.data.as_ref().map(|d| d.to_string()).unwrap_or_default())]
    Rpc(kep_api::live::RpcError),
    #[error("WebSocket: {0}")]
    WebSocket(#[from] tokio_tungstenite::tungstenite::Error),
    /// The server said something this client does not understand.
    #[error("protocol: {0}")]
    Protocol(String),
}

/// The operator API on the admin listener, with the operator token.
#[derive(Clone)]
pub struct AdminClient {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl AdminClient {
    pub fn new(base: impl Into<String>, token: impl Into<String>) -> Self {
        AdminClient {
            http: crate::tls::http(),
            base: base.into().trim_end_matches('/').to_owned(),
            token: token.into(),
        }
    }

    /// The admin listener this client calls.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    pub(crate) async fn send<T: serde::de::DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        Ok(self.send_raw(req).await?.json().await?)
    }

    /// A call whose answer has no body worth reading (204).
    pub(crate) async fn send_empty(&self, req: reqwest::RequestBuilder) -> Result<(), ClientError> {
        self.send_raw(req).await.map(drop)
    }

    /// A call whose answer is streamed back to the caller.
    pub(crate) async fn send_raw(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ClientError> {
        checked(req.bearer_auth(&self.token).send().await?).await
    }

    /// `POST /admin/v1/apply`: what a declaration did, object by object.
    pub async fn apply(
        &self,
        req: &kep_api::declared::ApplyRequest,
    ) -> Result<kep_api::declared::ApplyAnswer, ClientError> {
        self.send(self.http.post(self.url(kep_api::declared::APPLY)).json(req))
            .await
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

/// The answer if it is a 2xx, else `ClientError::Api` with its status and body.
pub(crate) async fn checked(res: reqwest::Response) -> Result<reqwest::Response, ClientError> {
    let status = res.status();
    if !status.is_success() {
        return Err(ClientError::Api {
            status: status.as_u16(),
            body: res.text().await.unwrap_or_default(),
        });
    }
    Ok(res)
}

/// A file on disk as a streamed request body, with its length.
async fn file_body(path: &std::path::Path) -> Result<(reqwest::Body, u64), ClientError> {
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| ClientError::Protocol(format!("{}: {e}", path.display())))?;
    let len = file
        .metadata()
        .await
        .map_err(|e| ClientError::Protocol(format!("{}: {e}", path.display())))?
        .len();
    let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(
        file,
        256 * 1024,
    ));
    Ok((body, len))
}

#[cfg(test)]
mod tests {
    use super::path;

    #[test]
    fn a_path_is_filled_in_order_one_encoded_segment_each() {
        assert_eq!(path("/a/{id}/b/{n}", &["x y/z", "7"]), "/a/x%20y%2Fz/b/7");
        assert_eq!(path("/plain", &[]), "/plain");
        assert_eq!(path("/{id}", &["~a-b_c.d"]), "/~a-b_c.d");
    }
}
