//! Provision: the two-step admin-token exchange of seed 000, with its nonce store.

use std::sync::Arc;
use std::time::Duration;

use kep_core::clock::Clock;

use kep_core::secret::{constant_time_eq, random_token, sha256_hex};

use crate::LiveError;
use crate::access::Access;
use crate::ids::ServiceId;
use crate::store::Store;
use kep_api::live::{ProvisionAuth, ProvisionParams, ProvisionResult, Scheme};

/// Nonces of step 1, each good for one step 2 within the transaction window. They are kept
/// in the store, so that step 2 may reach another node than step 1.
pub struct Nonces {
    window: Duration,
    clock: Clock,
    store: Arc<dyn Store>,
}

impl Nonces {
    pub fn new(window: Duration, clock: Clock, store: Arc<dyn Store>) -> Self {
        Nonces {
            window,
            clock,
            store,
        }
    }

    fn window_ms(&self) -> i64 {
        i64::try_from(self.window.as_millis()).unwrap_or(i64::MAX)
    }

    /// A fresh nonce for `service_id`, with a fresh window; those whose window ended go.
    pub async fn issue(&self, service_id: &str) -> sqlx::Result<String> {
        let nonce = random_token(16);
        let now = self.clock.unix_ms();
        let expired = now.saturating_sub(self.window_ms());
        self.store
            .insert_nonce(&nonce, service_id, now, expired)
            .await?;
        Ok(nonce)
    }

    /// Uses up `nonce`: fine when it was issued for `service_id` within the window, else
    /// why not (for the log: the nonce is no secret, and neither is this).
    pub async fn take(
        &self,
        nonce: &str,
        service_id: &str,
    ) -> sqlx::Result<Result<(), &'static str>> {
        let taken = self.store.take_nonce(nonce).await?;
        let now = self.clock.unix_ms();
        Ok(match taken {
            None => Err("unknown nonce (never issued, used or swept)"),
            Some((svc, _)) if svc != service_id => Err("a nonce of another service"),
            Some((_, issued)) if now.saturating_sub(issued) >= self.window_ms() => {
                Err("expired nonce")
            }
            Some(_) => Ok(()),
        })
    }
}

pub struct Provisioner {
    pub nonces: Nonces,
    pub token_ttl_s: u64,
    pub api_url: String,
    http: reqwest::Client,
}

impl Provisioner {
    pub fn new(
        window: Duration,
        token_ttl_s: u64,
        api_url: String,
        verifier_timeout: Duration,
        clock: Clock,
        store: Arc<dyn Store>,
    ) -> Self {
        let http = kep_core::outbound::client(verifier_timeout).expect("building the HTTP client");
        Provisioner {
            nonces: Nonces::new(window, clock, store),
            token_ttl_s,
            api_url,
            http,
        }
    }

    /// Step 1 (no `auth`) always fails with a nonce; step 2 returns a token or fails with
    /// a fresh nonce, whatever was wrong.
    pub async fn provision(
        &self,
        access: &Access,
        params: ProvisionParams,
    ) -> Result<ProvisionResult, LiveError> {
        let service_id = params.service_id;
        let Some(auth) = params.auth else {
            return Err(self.unauthorized(&service_id).await);
        };
        let refused = match self.nonces.take(&auth.nonce, &service_id).await? {
            Err(why) => Some(why),
            Ok(()) if auth.key != service_id => Some("key is not the serviceId"),
            Ok(()) => match access.service(&service_id) {
                None => Some("unknown service"),
                Some(svc) if !self.verify(params.scheme, &service_id, &svc, &auth).await => {
                    Some("wrong value")
                }
                Some(_) => None,
            },
        };
        if let Some(why) = refused {
            // Why, never the value or the secret it was checked against.
            tracing::info!(service_id, why, "provision refused");
            return Err(self.unauthorized(&service_id).await);
        }
        let Some(svc) = access.service(&service_id) else {
            return Err(self.unauthorized(&service_id).await);
        };
        let token = access
            .issue_token(&ServiceId::from(service_id.as_str()), self.token_ttl_s)
            .await?;
        Ok(ProvisionResult {
            uuid: svc.admin_uuid,
            token,
            ttl: self.token_ttl_s,
            api: self.api_url.clone(),
        })
    }

    /// Refused, with a fresh nonce to try again with.
    async fn unauthorized(&self, service_id: &str) -> LiveError {
        match self.nonces.issue(service_id).await {
            Ok(nonce) => LiveError::Unauthorized { nonce: Some(nonce) },
            Err(e) => e.into(),
        }
    }

    async fn verify(
        &self,
        scheme: Scheme,
        service_id: &str,
        svc: &crate::access::Service,
        auth: &ProvisionAuth,
    ) -> bool {
        match scheme {
            Scheme::Internal => {
                let expected = sha256_hex(&format!("{}:{}", svc.admin_ha, auth.nonce));
                constant_time_eq(&expected, &auth.value)
            }
            Scheme::External => {
                let Some(url) = &svc.external_verifier_url else {
                    return false;
                };
                let body = serde_json::json!({
                    "serviceId": service_id, "nonce": auth.nonce, "value": auth.value,
                });
                // The one answer it got decides: a redirect is not followed, so not a yes.
                match self.http.post(url).json(&body).send().await {
                    Ok(res) => res.status().is_success(),
                    Err(e) => {
                        let error = kep_core::outbound::error_text(e);
                        tracing::warn!(service_id, error, "external verifier unreachable");
                        false
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn nonces(window: Duration, clock: Clock) -> (Nonces, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::open(&kep_core::service::Context::standalone(dir.path()))
            .await
            .unwrap();
        (Nonces::new(window, clock, store), dir)
    }

    #[tokio::test]
    async fn a_nonce_is_single_use_and_bound_to_its_service() {
        let (nonces, _dir) = nonces(Duration::from_secs(5), Clock::system()).await;
        let n = nonces.issue("a").await.unwrap();
        let take = |n: String, svc: &'static str| {
            let nonces = &nonces;
            async move { nonces.take(&n, svc).await.unwrap() }
        };
        assert_eq!(take(n, "b").await, Err("a nonce of another service"));
        let n = nonces.issue("a").await.unwrap();
        assert_eq!(take(n.clone(), "a").await, Ok(()));
        let unknown = Err("unknown nonce (never issued, used or swept)");
        assert_eq!(take(n, "a").await, unknown, "used twice");
        assert_eq!(take("never-issued".into(), "a").await, unknown);
    }

    #[tokio::test]
    async fn a_nonce_expires_with_its_window() {
        let clock = Clock::manual(jiff::Timestamp::UNIX_EPOCH);
        let (nonces, _dir) = nonces(Duration::from_millis(30), clock.clone()).await;
        let n = nonces.issue("a").await.unwrap();
        clock.advance(Duration::from_millis(29));
        assert_eq!(
            nonces.take(&n, "a").await.unwrap(),
            Ok(()),
            "within the window"
        );
        let n = nonces.issue("a").await.unwrap();
        clock.advance(Duration::from_millis(30));
        assert_eq!(
            nonces.take(&n, "a").await.unwrap(),
            Err("expired nonce"),
            "at its end"
        );
        // Issuing sweeps what expired: the first of these is gone when the second is made.
        let swept = nonces.issue("a").await.unwrap();
        clock.advance(Duration::from_millis(30));
        let _ = nonces.issue("a").await.unwrap();
        assert_eq!(
            nonces.take(&swept, "a").await.unwrap(),
            Err("unknown nonce (never issued, used or swept)")
        );
    }
}
