//! `/readyz` on the admin listener: no token needed.

use std::time::Duration;

use kep_api::readiness::{READYZ, Readiness};

use crate::ClientError;

/// The readiness the admin listener at `base` answers (200 ready, 503 starting), within
/// `timeout`; an error when nothing answers or the answer is not one.
pub async fn readiness(base: &str, timeout: Duration) -> Result<Readiness, ClientError> {
    let url = format!("{}{READYZ}", base.trim_end_matches('/'));
    let res = crate::tls::http().get(url).timeout(timeout).send().await?;
    let status = res.status().as_u16();
    if status != 200 && status != 503 {
        return Err(ClientError::Api {
            status,
            body: res.text().await.unwrap_or_default(),
        });
    }
    Ok(res.json().await?)
}
