//! OAuth 2.0 client credentials (RFC 6749 §4.4) and the Bearer check of every message call.

use axum::http::{HeaderMap, header};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use kep_core::clock::Clock;
use kep_core::secret::{constant_time_eq, new_secret, sha256, sha256_hex};

use crate::error::{MessagingError, OAuthError};
use crate::ids::ClientId;
use crate::store::Store;

/// How the client authenticated; RFC 6749 §2.3 allows one method per request.
fn client_credentials(
    headers: &HeaderMap,
    form: &[(String, String)],
) -> Result<(String, String), OAuthError> {
    let field = |name: &str| form.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let from_form = match (field("client_id"), field("client_secret")) {
        (Some(id), Some(secret)) => Some((id, secret)),
        (None, None) => None,
        _ => {
            return Err(OAuthError::InvalidRequest(
                "client_id and client_secret go together",
            ));
        }
    };
    let from_header = match headers.get(header::AUTHORIZATION) {
        None => None,
        Some(value) => {
            let value = value.to_str().map_err(|_| OAuthError::InvalidClient)?;
            let rest = value
                .strip_prefix("Basic ")
                .ok_or(OAuthError::InvalidClient)?
                .trim();
            Some(match rest.split_once(' ') {
                // The service's own form: `Basic <client_id> <client_secret>`.
                Some((id, secret)) => (id.to_owned(), secret.trim().to_owned()),
                // RFC 6749 §2.3.1: base64 of `id:secret`, each form-urlencoded.
                None => {
                    let decoded = STANDARD
                        .decode(rest)
                        .map_err(|_| OAuthError::InvalidClient)?;
                    let text = String::from_utf8(decoded).map_err(|_| OAuthError::InvalidClient)?;
                    let (id, secret) = text.split_once(':').ok_or(OAuthError::InvalidClient)?;
                    (url_decode(id)?, url_decode(secret)?)
                }
            })
        }
    };
    match (from_header, from_form) {
        (Some(_), Some(_)) => Err(OAuthError::InvalidRequest(
            "use one client authentication method",
        )),
        (Some(c), None) | (None, Some(c)) => Ok(c),
        (None, None) => Err(OAuthError::InvalidClient),
    }
}

/// The form's (first) `grant_type`.
fn grant_type(form: &[(String, String)]) -> Option<&str> {
    form.iter()
        .find(|(k, _)| k == "grant_type")
        .map(|(_, v)| v.as_str())
}

/// Percent- and plus-decoding of one `application/x-www-form-urlencoded` value.
fn url_decode(s: &str) -> Result<String, OAuthError> {
    Ok(form_urlencoded::parse(format!("v={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default())
}

/// The token answer.
pub struct Issued {
    pub access_token: String,
    pub expires_in: u64,
}

/// Access tokens: stored hashed in the database, and cached in memory by their digest, so
/// the check on every message call reads no disk.
pub struct Tokens {
    store: Arc<dyn Store>,
    clock: Clock,
    cache: RwLock<HashMap<[u8; 32], (ClientId, i64)>>,
    /// Bumped by every revocation: a lookup that read the database before one must not
    /// put a revoked token back into the cache.
    revocations: AtomicU64,
}

impl Tokens {
    pub fn new(store: Arc<dyn Store>, clock: Clock) -> Self {
        Tokens {
            store,
            clock,
            cache: RwLock::default(),
            revocations: AtomicU64::new(0),
        }
    }

    /// `POST /v2/oauth/token`, first half: the client whose credentials the request
    /// carries.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        form: &[(String, String)],
    ) -> Result<ClientId, OAuthError> {
        if grant_type(form).is_none() {
            return Err(OAuthError::InvalidRequest("grant_type is required"));
        }
        let (client_id, secret) = client_credentials(headers, form)?;
        let client_id = ClientId::from(client_id);
        let known = self.store.client_secret_hash(&client_id).await?;
        if !known.is_some_and(|h| constant_time_eq(&h, &sha256_hex(&secret))) {
            return Err(OAuthError::InvalidClient);
        }
        Ok(client_id)
    }

    /// `POST /v2/oauth/token`, second half: a token for the authenticated client.
    pub async fn issue(
        &self,
        client_id: ClientId,
        ttl_s: u64,
        form: &[(String, String)],
    ) -> Result<Issued, OAuthError> {
        if grant_type(form) != Some("client_credentials") {
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
        Ok(Issued {
            access_token,
            expires_in: ttl_s,
        })
    }

    /// The client of a message call's `Authorization: Bearer <token>`. `bare_ok` also takes
    /// the token without the word (the seed's MMS upload example sends it so).
    pub async fn authorize(
        &self,
        headers: &HeaderMap,
        bare_ok: bool,
    ) -> Result<ClientId, MessagingError> {
        let value = headers
            .get(header::AUTHORIZATION)
            .ok_or(MessagingError::Unauthorized("Authorization is required"))?
            .to_str()
            .map_err(|_| MessagingError::Unauthorized("malformed Authorization"))?;
        let token = match value.strip_prefix("Bearer ") {
            Some(t) => t.trim(),
            None if bare_ok && !value.contains(' ') => value.trim(),
            None => {
                return Err(MessagingError::Unauthorized(
                    "expected Bearer <access token>",
                ));
            }
        };
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

    /// The client's secret changed or it is gone: its tokens stop working.
    pub fn forget_client(&self, client_id: &ClientId) {
        let mut cache = self.cache.write().expect("token cache lock");
        self.revocations.fetch_add(1, Ordering::SeqCst);
        cache.retain(|_, (c, _)| c != client_id);
    }
}

/// The `accept` rule of every message call: absent, or one that takes JSON.
pub fn check_accept(headers: &HeaderMap) -> Result<(), MessagingError> {
    let Some(accept) = headers.get(header::ACCEPT) else {
        return Ok(());
    };
    let accept = accept.to_str().unwrap_or("");
    let takes_json = accept.split(',').any(|r| {
        let media = r.split(';').next().unwrap_or("").trim();
        matches!(media, "*/*" | "application/*" | "application/json")
    });
    if takes_json {
        Ok(())
    } else {
        Err(MessagingError::invalid(
            "accept",
            "must accept */* or application/json",
        ))
    }
}
