//! Who may do what: the live services (by the hashes of their secrets) and the admin
//! tokens that Provision hands out.
//!
//! Both are kept in memory, written through to the store, and loaded at start: every Room
//! call and every participant join checks them, and a database read on that path would cost
//! more than the call itself. With several nodes, a change made on one is announced to the
//! others, which read it back from the store, before its call answers.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, Weak};

use kep_core::secret::{new_secret, new_uuid, sha256, sha256_hex};

use kep_core::clock::Clock;
use kep_core::cluster::Cluster;

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

impl Service {
    fn of_row(r: ServiceRow) -> (ServiceId, Service) {
        let svc = Service {
            admin_ha: r.admin_ha,
            service_hs: r.service_hs,
            admin_uuid: r.admin_uuid,
            external_verifier_url: r.external_verifier_url,
        };
        (r.service_id, svc)
    }
}

impl Grant {
    /// A stored token as the cache keeps it: by the digest its hex hash spells.
    fn of_row(t: TokenRow) -> Option<([u8; 32], Grant)> {
        let mut digest = [0u8; 32];
        hex::decode_to_slice(&t.token_hash, &mut digest).ok()?;
        let grant = Grant {
            service_id: t.service_id.as_str().into(),
            expires_at: t.expires_at,
        };
        Some((digest, grant))
    }
}

/// Runs `apply` on the access, if it is still there, for a change another node announced.
async fn reload<F>(
    access: Weak<Access>,
    key: String,
    apply: fn(Arc<Access>, String) -> F,
) -> Result<String, String>
where
    F: std::future::Future<Output = sqlx::Result<()>>,
{
    let Some(access) = access.upgrade() else {
        return Err("the live service stopped".into());
    };
    apply(access, key).await.map_err(|e| e.to_string())?;
    Ok(String::new())
}

pub enum CreateOutcome {
    Created(ServiceSecrets),
    Taken,
}

/// The cluster's topics: a service (by id) or an admin token (by hash) changed.
const SERVICE_CHANGED: &str = "live.service";
const TOKEN_ISSUED: &str = "live.token";

pub struct Access {
    store: Arc<dyn Store>,
    clock: Clock,
    cluster: Cluster,
    services: RwLock<HashMap<ServiceId, Service>>,
    /// By the SHA-256 digest of the token (raw bytes: no hex on the hot path).
    tokens: RwLock<HashMap<[u8; 32], Grant>>,
}

impl Access {
    /// Loads the services and tokens, and takes the changes other nodes announce.
    pub async fn load(
        store: Arc<dyn Store>,
        clock: Clock,
        cluster: Cluster,
    ) -> sqlx::Result<Arc<Self>> {
        let services = store
            .services()
            .await?
            .into_iter()
            .map(Service::of_row)
            .collect();
        let tokens = store
            .live_tokens(clock.unix_s())
            .await?
            .into_iter()
            .filter_map(Grant::of_row)
            .collect();
        let access = Arc::new(Access {
            store,
            clock,
            cluster: cluster.clone(),
            services: RwLock::new(services),
            tokens: RwLock::new(tokens),
        });
        let me = Arc::downgrade(&access);
        cluster.handle(
            SERVICE_CHANGED,
            Arc::new(move |id| Box::pin(reload(me.clone(), id, Access::reload_service))),
        );
        let me = Arc::downgrade(&access);
        cluster.handle(
            TOKEN_ISSUED,
            Arc::new(move |hash| Box::pin(reload(me.clone(), hash, Access::reload_token))),
        );
        Ok(access)
    }

    /// A service as another node left it.
    async fn reload_service(self: Arc<Self>, service_id: String) -> sqlx::Result<()> {
        let service_id = ServiceId::from(service_id);
        let row = self.store.service(&service_id).await?;
        let mut services = self.services.write().expect("services lock");
        match row {
            Some(row) => {
                let (id, svc) = Service::of_row(row);
                services.insert(id, svc);
            }
            None => {
                services.remove(&service_id);
            }
        }
        Ok(())
    }

    /// A token another node issued.
    async fn reload_token(self: Arc<Self>, token_hash: String) -> sqlx::Result<()> {
        if let Some((digest, grant)) = self.store.token(&token_hash).await?.and_then(Grant::of_row)
        {
            self.tokens
                .write()
                .expect("tokens lock")
                .insert(digest, grant);
        }
        Ok(())
    }

    /// Tells the other nodes, and waits until they took it.
    async fn announce(&self, topic: &str, key: &str) {
        if let Err(e) = self.cluster.broadcast(topic, key).await {
            tracing::warn!(error = %e, topic, "other nodes were not told of a change");
        }
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
        (admin_secret, service_secret): (String, String),
    ) -> sqlx::Result<CreateOutcome> {
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
        self.announce(SERVICE_CHANGED, row.service_id.as_str())
            .await;
        Ok(CreateOutcome::Created(ServiceSecrets {
            service_id: row.service_id.into_string(),
            admin_secret,
            service_secret,
        }))
    }

    /// New admin and service secrets; `None` for an unknown service. Tokens already handed
    /// out stay valid until they expire.
    pub async fn rotate(&self, service_id: &ServiceId) -> sqlx::Result<Option<ServiceSecrets>> {
        self.set_secrets(service_id, (new_secret(), new_secret()))
            .await
    }

    /// Whether `(admin_secret, service_secret)` are the service's now (their hashes tell);
    /// `None` for an unknown service.
    pub async fn has_secrets(
        &self,
        service_id: &ServiceId,
        (admin_secret, service_secret): (&str, &str),
    ) -> sqlx::Result<Option<bool>> {
        let Some(row) = self.store.service(service_id).await? else {
            return Ok(None);
        };
        let ha = sha256_hex(&format!("{service_id}:{admin_secret}"));
        let hs = sha256_hex(&format!("{service_id}:{service_secret}"));
        Ok(Some(row.admin_ha == ha && row.service_hs == hs))
    }

    /// These admin and service secrets; `None` for an unknown service.
    pub async fn set_secrets(
        &self,
        service_id: &ServiceId,
        (admin_secret, service_secret): (String, String),
    ) -> sqlx::Result<Option<ServiceSecrets>> {
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
        self.announce(SERVICE_CHANGED, service_id.as_str()).await;
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
        self.announce(SERVICE_CHANGED, service_id.as_str()).await;
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
        {
            let mut tokens = self.tokens.write().expect("tokens lock");
            tokens.retain(|_, g| g.expires_at > now);
            tokens.insert(
                digest,
                Grant {
                    service_id: row.service_id.as_str().into(),
                    expires_at: row.expires_at,
                },
            );
        }
        self.announce(TOKEN_ISSUED, &row.token_hash).await;
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
