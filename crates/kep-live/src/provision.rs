//! Provision: the two-step admin-token exchange of seed 000, with its nonce store.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;
use kep_core::clock::Clock;

use kep_core::secret::{constant_time_eq, random_token, sha256_hex};

use crate::LiveError;
use crate::access::Access;
use crate::ids::ServiceId;
use kep_api::live::{ProvisionAuth, ProvisionParams, ProvisionResult, Scheme};

/// Nonces of step 1, each good for one step 2 within the transaction window.
pub struct Nonces {
    window: Duration,
    clock: Clock,
    inner: Mutex<NonceState>,
}

#[derive(Default)]
struct NonceState {
    live: HashMap<String, (String, Timestamp)>,
    // Issue order, so expired nonces are swept from the front without a scan.
    order: VecDeque<(Timestamp, String)>,
}

impl Nonces {
    pub fn new(window: Duration, clock: Clock) -> Self {
        Nonces {
            window,
            clock,
            inner: Mutex::new(NonceState::default()),
        }
    }

    /// A fresh nonce for `service_id`, with a fresh window.
    pub fn issue(&self, service_id: &str) -> String {
        let nonce = random_token(16);
        let now = self.clock.now();
        let mut st = self.inner.lock().expect("nonce lock");
        while let Some((issued, _)) = st.order.front() {
            if self.within(*issued, now) {
                break;
            }
            let (_, old) = st.order.pop_front().expect("front exists");
            st.live.remove(&old);
        }
        st.live.insert(nonce.clone(), (service_id.to_owned(), now));
        st.order.push_back((now, nonce.clone()));
        nonce
    }

    /// Uses up `nonce`: fine when it was issued for `service_id` within the window, else
    /// why not (for the log: the nonce is no secret, and neither is this).
    pub fn take(&self, nonce: &str, service_id: &str) -> Result<(), &'static str> {
        let taken = self.inner.lock().expect("nonce lock").live.remove(nonce);
        let now = self.clock.now();
        match taken {
            None => Err("unknown nonce (never issued, used or swept)"),
            Some((svc, _)) if svc != service_id => Err("a nonce of another service"),
            Some((_, issued)) if !self.within(issued, now) => Err("expired nonce"),
            Some(_) => Ok(()),
        }
    }

    fn within(&self, issued: Timestamp, now: Timestamp) -> bool {
        now.duration_since(issued).unsigned_abs() < self.window
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
    ) -> Self {
        let http = reqwest::Client::builder()
            .timeout(verifier_timeout)
            .build()
            .expect("building the HTTP client");
        Provisioner {
            nonces: Nonces::new(window, clock),
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
            return Err(self.unauthorized(&service_id));
        };
        let refused = match self.nonces.take(&auth.nonce, &service_id) {
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
            return Err(self.unauthorized(&service_id));
        }
        let svc = access
            .service(&service_id)
            .ok_or_else(|| self.unauthorized(&service_id))?;
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

    fn unauthorized(&self, service_id: &str) -> LiveError {
        LiveError::Unauthorized {
            nonce: Some(self.nonces.issue(service_id)),
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
                match self.http.post(url).json(&body).send().await {
                    Ok(res) => res.status().is_success(),
                    Err(e) => {
                        tracing::warn!(service_id, error = %e, "external verifier unreachable");
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

    #[test]
    fn a_nonce_is_single_use_and_bound_to_its_service() {
        let nonces = Nonces::new(Duration::from_secs(5), Clock::system());
        let n = nonces.issue("a");
        assert_eq!(nonces.take(&n, "b"), Err("a nonce of another service"));
        let n = nonces.issue("a");
        assert_eq!(nonces.take(&n, "a"), Ok(()));
        let unknown = Err("unknown nonce (never issued, used or swept)");
        assert_eq!(nonces.take(&n, "a"), unknown, "used twice");
        assert_eq!(nonces.take("never-issued", "a"), unknown);
    }

    #[test]
    fn a_nonce_expires_with_its_window() {
        let clock = Clock::manual(Timestamp::UNIX_EPOCH);
        let nonces = Nonces::new(Duration::from_millis(30), clock.clone());
        let n = nonces.issue("a");
        clock.advance(Duration::from_millis(29));
        assert_eq!(nonces.take(&n, "a"), Ok(()), "within the window");
        let n = nonces.issue("a");
        clock.advance(Duration::from_millis(30));
        assert_eq!(nonces.take(&n, "a"), Err("expired nonce"), "at its end");
        // Issuing sweeps what expired.
        let _ = nonces.issue("a");
        clock.advance(Duration::from_millis(30));
        let _ = nonces.issue("a");
        assert_eq!(nonces.inner.lock().unwrap().live.len(), 1);
    }
}
