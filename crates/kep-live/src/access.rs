//! Who may do what: the live services (by the hashes of their secrets) and the admin
//! tokens that Provision hands out.
//!
//! Both are kept in memory, written through to `live.db`, and loaded at start: every Room
//! call and every participant join checks them, and a database read on that path would cost
//! more than the call itself.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kep_core::secret::{new_secret, new_uuid, sha256, sha256_hex};

use kep_core::clock::Clock;

use crate::ids::ServiceId;
use crate::store::{ServiceRow, Store, TokenRow};
use kep_api::live::ServiceSecrets;

#[derive(Debug, Clone)]
pub struct Service {
    pub admin_ha: String,
    pub service_hs: String,
    pub admin_uuid: String,
    pub external_verifier_url: Option<String>,
}

/// An admin token's grant: which service, until when (unix seconds).
#[derive(Debug, Clone)]
pub struct Grant {
    pub service_id: Arc<str>,
    pub expires_at: i64,
}

pub enum CreateOutcome {
    Created(ServiceSecrets),
    Taken,
}

pub struct Access {
    store: Arc<dyn Store>,
    clock: Clock,
    services: RwLock<HashMap<ServiceId, Service>>,
    /// By the SHA-256 digest of the token (raw bytes: no hex on the hot path).
    tokens: RwLock<HashMap<[u8; 32], Grant>>,
}

impl Access {
    pub async fn load(store: Arc<dyn Store>, clock: Clock) -> sqlx::Result<Self> {
        let services = store
            .services()
            .await?
            .into_iter()
            .map(|r| {
                let svc = Service {
                    admin_ha: r.admin_ha,
                    service_hs: r.service_hs,
                    admin_uuid: r.admin_uuid,
                    external_verifier_url: r.external_verifier_url,
                };
                (r.service_id, svc)
            })
            .collect();
        let tokens = store
            .live_tokens(clock.unix_s())
            .await?
            .into_iter()
            .filter_map(|t| {
                let mut digest = [0u8; 32];
                hex::decode_to_slice(&t.token_hash, &mut digest).ok()?;
                let grant = Grant {
                    service_id: t.service_id.as_str().into(),
                    expires_at: t.expires_at,
                };
                Some((digest, grant))
            })
            .collect();
        Ok(Access {
            store,
            clock,
            services: RwLock::new(services),
            tokens: RwLock::new(tokens),
        })
    }

    /// The clock tokens expire by.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    pub fn service(&self, service_id: &str) -> Option<Service> {
        self.services
            .read()
            .expect("services lock")
            .get(service_id)
            .cloned()
    }

    /// Service ids, in creation order.
    pub async fn list(&self) -> sqlx::Result<Vec<ServiceId>> {
        Ok(self
            .store
            .services()
            .await?
            .into_iter()
            .map(|r| r.service_id)
            .collect())
    }

    pub async fn create(
        &self,
        service_id: ServiceId,
        external_verifier_url: Option<String>,
    ) -> sqlx::Result<CreateOutcome> {
        let (admin_secret, service_secret) = (new_secret(), new_secret());
        let row = ServiceRow {
            admin_ha: sha256_hex(&format!("{service_id}:{admin_secret}")),
            service_hs: sha256_hex(&format!("{service_id}:{service_secret}")),
            admin_uuid: new_uuid(),
            external_verifier_url,
            service_id,
        };
        if !self.store.insert_service(&row, self.clock.unix_s()).await? {
            return Ok(CreateOutcome::Taken);
        }
        let svc = Service {
            admin_ha: row.admin_ha,
            service_hs: row.service_hs,
            admin_uuid: row.admin_uuid,
            external_verifier_url: row.external_verifier_url,
        };
        self.services
            .write()
            .expect("services lock")
            .insert(row.service_id.clone(), svc);
        Ok(CreateOutcome::Created(ServiceSecrets {
            service_id: row.service_id.into_string(),
            admin_secret,
            service_secret,
        }))
    }

    /// New admin and service secrets; `None` for an unknown service. Tokens already handed
    /// out stay valid until they expire.
    pub async fn rotate(&self, service_id: &ServiceId) -> sqlx::Result<Option<ServiceSecrets>> {
        let (admin_secret, service_secret) = (new_secret(), new_secret());
        let ha = sha256_hex(&format!("{service_id}:{admin_secret}"));
        let hs = sha256_hex(&format!("{service_id}:{service_secret}"));
        if !self.store.update_secrets(service_id, &ha, &hs).await? {
            return Ok(None);
        }
        if let Some(svc) = self
            .services
            .write()
            .expect("services lock")
            .get_mut(service_id)
        {
            svc.admin_ha = ha;
            svc.service_hs = hs;
        }
        Ok(Some(ServiceSecrets {
            service_id: service_id.to_string(),
            admin_secret,
            service_secret,
        }))
    }

    pub async fn set_verifier(
        &self,
        service_id: &ServiceId,
        url: Option<String>,
    ) -> sqlx::Result<bool> {
        if !self
            .store
            .update_verifier(service_id, url.as_deref())
            .await?
        {
            return Ok(false);
        }
        if let Some(svc) = self
            .services
            .write()
            .expect("services lock")
            .get_mut(service_id)
        {
            svc.external_verifier_url = url;
        }
        Ok(true)
    }

    /// Issues an admin token for `service_id`, valid `ttl_s` seconds; stored hashed.
    pub async fn issue_token(&self, service_id: &ServiceId, ttl_s: u64) -> sqlx::Result<String> {
        let token = new_secret();
        let now = self.clock.unix_s();
        let digest = sha256(&token);
        let row = TokenRow {
            token_hash: hex::encode(digest),
            service_id: service_id.clone(),
            expires_at: now.saturating_add(i64::try_from(ttl_s).unwrap_or(i64::MAX)),
        };
        self.store.insert_token(&row, now).await?;
        let mut tokens = self.tokens.write().expect("tokens lock");
        tokens.retain(|_, g| g.expires_at > now);
        tokens.insert(
            digest,
            Grant {
                service_id: row.service_id.as_str().into(),
                expires_at: row.expires_at,
            },
        );
        Ok(token)
    }

    /// The service a presented admin token is for, if it is known and unexpired.
    pub fn authorize(&self, token: &str) -> Option<Arc<str>> {
        let digest = sha256(token);
        let tokens = self.tokens.read().expect("tokens lock");
        let grant = tokens.get(&digest)?;
        (grant.expires_at > self.clock.unix_s()).then(|| grant.service_id.clone())
    }
}
