//! The operator's API clients: each created with a secret shown once (only its hash is
//! kept); a new secret or the client's deletion ends every token it got.

use kep_core::secret::{new_secret, random_token, sha256_hex};

use serde_json::{Value, json};

use crate::Messaging;
use crate::ids::ClientId;

/// A client id kep takes: letters and digits only, since the id travels inside `Basic <id>
/// <secret>` and `id:secret`; 1 to 64 of them.
pub(crate) fn valid_client_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

impl Messaging {
    /// A new client: its id and secret.
    /// A new client of `secret`, whose id is `given` or generated; `None` when a client of
    /// the given id exists.
    pub async fn create_client(
        &self,
        given: Option<ClientId>,
        name: Option<&str>,
        secret: String,
    ) -> sqlx::Result<Option<(ClientId, String)>> {
        // Letters and digits only: the id travels inside `Basic <id> <secret>` and
        // `id:secret`.
        let client_id =
            given.unwrap_or_else(|| ClientId::from(random_token(12).replace(['-', '_'], "x")));
        let now = self.clock.unix_s();
        if !self
            .store
            .insert_client(&client_id, name, &sha256_hex(&secret), now)
            .await?
        {
            return Ok(None);
        }
        let detail = json!({ "name": name });
        self.activity
            .record("client.created", &[&client_id], detail);
        Ok(Some((client_id, secret)))
    }

    /// A new secret for the client; `None` for an unknown client.
    pub async fn new_client_secret(&self, client_id: &ClientId) -> sqlx::Result<Option<String>> {
        self.set_client_secret(client_id, new_secret()).await
    }

    /// `secret` for the client, ending every token it got; `None` for an unknown client.
    pub async fn set_client_secret(
        &self,
        client_id: &ClientId,
        secret: String,
    ) -> sqlx::Result<Option<String>> {
        if !self
            .store
            .set_client_secret(client_id, &sha256_hex(&secret))
            .await?
        {
            return Ok(None);
        }
        self.tokens.revoke_client(client_id).await;
        self.activity
            .record("client.secret_rotated", &[&client_id], Value::Null);
        Ok(Some(secret))
    }

    /// The client, its tokens and its messages; `false` for an unknown client.
    pub async fn delete_client(&self, client_id: &ClientId) -> sqlx::Result<bool> {
        if !self.store.delete_client(client_id).await? {
            return Ok(false);
        }
        self.tokens.revoke_client(client_id).await;
        self.activity
            .record("client.deleted", &[&client_id], Value::Null);
        Ok(true)
    }
}
