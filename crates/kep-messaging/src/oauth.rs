//! OAuth 2.0 client credentials (RFC 6749 §4.4) and the Bearer check of every message call:
//! the tokens and what they grant. Where a request carries them is `api::auth`'s.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use kep_core::clock::Clock;
use kep_core::cluster::Cluster;
use kep_core::secret::{constant_time_eq, new_secret, sha256, sha256_hex};

use crate::error::{MessagingError, OAuthError};
use crate::ids::ClientId;
use crate::store::Store;

/// The token answer.
pub struct Issued {
    pub access_token: String,
    pub expires_in: u64,
}

/// A client's tokens were revoked (topic of the cluster; the body is its id).
const CLIENT_REVOKED: &str = "messaging.client";

/// Access tokens: stored hashed in the database, and cached in memory by their digest, so
/// the check on every message call reads no disk. A node that has not cached a token reads
/// the database; a revocation is announced to every node before its call answers.
pub struct Tokens {
    store: Arc<dyn Store>,
    clock: Clock,
    cluster: Cluster,
    cache: RwLock<HashMap<[u8; 32], (ClientId, i64)>>,
    /// Bumped by every revocation: a lookup that read the database before one must not
    /// put a revoked token back into the cache.
    revocations: AtomicU64,
}

impl Tokens {
    /// Tokens that also forget what other nodes revoke.
    pub fn new(store: Arc<dyn Store>, clock: Clock, cluster: Cluster) -> Arc<Self> {
        let tokens = Arc::new(Tokens {
            store,
            clock,
            cluster: cluster.clone(),
            cache: RwLock::default(),
            revocations: AtomicU64::new(0),
        });
        let me = Arc::downgrade(&tokens);
        cluster.handle(
            CLIENT_REVOKED,
            Arc::new(move |client_id| {
                if let Some(tokens) = me.upgrade() {
                    tokens.forget_client(&ClientId::from(client_id));
                }
                Box::pin(std::future::ready(Ok(String::new())))
            }),
        );
        tokens
    }

    /// `POST /v2/oauth/token`, first half: the client, if `secret` is its secret.
    pub async fn authenticate(
        &self,
        client_id: &str,
        secret: &str,
    ) -> Result<ClientId, OAuthError> {
        let client_id = ClientId::from(client_id);
        let known = self.store.client_secret_hash(&client_id).await?;
        if !known.is_some_and(|h| constant_time_eq(&h, &sha256_hex(secret))) {
            return Err(OAuthError::InvalidClient);
        }
        Ok(client_id)
    }

    /// `POST /v2/oauth/token`, second half: a token for the authenticated client, for the
    /// grant type the form asked.
    pub async fn issue(
        &self,
        client_id: ClientId,
        ttl_s: u64,
        grant_type: Option<&str>,
    ) -> Result<Issued, OAuthError> {
        if grant_type != Some("client_credentials") {
            return Err(OAuthError::UnsupportedGrantType);
        }
        let access_token = new_secret();
        let now = self.clock.unix_s();
        let expires_at = now.saturating_add(i64::try_from(ttl_s).unwrap_or(i64::MAX));
        let digest = sha256(&access_token);
        self.store
            .insert_token(&hex::encode(digest), &client_id, expires_at, now)
            .await?;
        let mut cache = self.cache.write().expect("token cache lock");
        cache.retain(|_, (_, exp)| *exp > now);
        cache.insert(digest, (client_id, expires_at));
        metrics::counter!(crate::metrics::TOKENS_ISSUED).increment(1);
        Ok(Issued {
            access_token,
            expires_in: ttl_s,
        })
    }

    /// The client of a message call's access token.
    pub async fn authorize(&self, token: &str) -> Result<ClientId, MessagingError> {
        let digest = sha256(token);
        let now = self.clock.unix_s();
        if let Some((client, exp)) = self.cache.read().expect("token cache lock").get(&digest)
            && *exp > now
        {
            return Ok(client.clone());
        }
        // Not cached (issued before a restart): the database knows, and the cache learns.
        let seen = self.revocations.load(Ordering::SeqCst);
        let (client, expires_at) = self
            .store
            .token_client(&hex::encode(digest), now)
            .await?
            .ok_or(MessagingError::Unauthorized(
                "unknown or expired access token",
            ))?;
        let mut cache = self.cache.write().expect("token cache lock");
        if self.revocations.load(Ordering::SeqCst) == seen {
            cache.insert(digest, (client.clone(), expires_at));
        }
        Ok(client)
    }

    /// The client's secret changed or it is gone: its tokens stop working, on every node.
    pub async fn revoke_client(&self, client_id: &ClientId) {
        self.forget_client(client_id);
        if let Err(e) = self
            .cluster
            .broadcast(CLIENT_REVOKED, client_id.as_str())
            .await
        {
            tracing::warn!(error = %e, "other nodes were not told of a revocation");
        }
    }

    fn forget_client(&self, client_id: &ClientId) {
        let mut cache = self.cache.write().expect("token cache lock");
        self.revocations.fetch_add(1, Ordering::SeqCst);
        cache.retain(|_, (c, _)| c != client_id);
    }
}
