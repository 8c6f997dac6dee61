//! `[[messaging.clients]]` of a declaration: each client created with its id and secret, or
//! given the declared secret when its hash differs; `--prune` deletes the clients not
//! named. A client's `name` may not change (the operator API has no call that changes it).

use std::collections::HashSet;
use std::sync::Arc;

use kep_api::declared::{Applied, Outcome};
use kep_core::declared::{ApplyError, Declares, Planned, Steps, read_section, secret};
use kep_core::secret::sha256_hex;
use serde::Deserialize;
use serde_json::Value;

use crate::Messaging;
use crate::ids::ClientId;

const KIND: &str = "messaging.clients";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    #[serde(default)]
    clients: Option<Vec<Client>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Client {
    client_id: String,
    client_secret: String,
    #[serde(default)]
    name: Option<String>,
}

enum Step {
    Create(ClientId, Option<String>, String),
    SetSecret(ClientId, String),
    Delete(ClientId),
}

pub(crate) struct Declared(pub(crate) Arc<Messaging>);

#[async_trait::async_trait]
impl Declares for Declared {
    fn section(&self) -> &'static str {
        "messaging"
    }

    async fn plan(&self, section: Value, prune: bool) -> Result<Box<dyn Planned>, ApplyError> {
        let Section { clients } = read_section("messaging", section)?;
        let mut steps = Steps::new(KIND);
        let Some(clients) = clients else {
            return Ok(Box::new(Plan(steps, Arc::clone(&self.0))));
        };
        let stored = self.0.store.clients().await?;
        for c in clients {
            let id = c.client_id;
            steps.once(&id)?;
            if !crate::clients::valid_client_id(&id) {
                return Err(ApplyError::refused(format!(
                    "{KIND} {id}: client_id: 1 to 64 letters and digits"
                )));
            }
            let given = secret(KIND, &id, "client_secret", c.client_secret)?;
            let client_id = ClientId::from(id.clone());
            let Some(row) = stored.iter().find(|r| r.client_id == client_id) else {
                steps.push(
                    id,
                    Outcome::Created,
                    Some(Step::Create(client_id, c.name, given)),
                );
                continue;
            };
            if row.name != c.name {
                return Err(ApplyError::refused(format!(
                    "{KIND} {id}: name: may not change (delete the client and declare it again)"
                )));
            }
            let hash = self.0.store.client_secret_hash(&client_id).await?;
            if hash.as_deref() == Some(sha256_hex(&given).as_str()) {
                steps.push(id, Outcome::Unchanged, None);
            } else {
                steps.push(
                    id,
                    Outcome::Changed,
                    Some(Step::SetSecret(client_id, given)),
                );
            }
        }
        if prune {
            let named: HashSet<String> = steps.outcomes().into_iter().map(|a| a.id).collect();
            for row in stored {
                if !named.contains(row.client_id.as_str()) {
                    let id = row.client_id.to_string();
                    steps.push(id, Outcome::Deleted, Some(Step::Delete(row.client_id)));
                }
            }
        }
        Ok(Box::new(Plan(steps, Arc::clone(&self.0))))
    }
}

struct Plan(Steps<Step>, Arc<Messaging>);

#[async_trait::async_trait]
impl Planned for Plan {
    fn outcomes(&self) -> Vec<Applied> {
        self.0.outcomes()
    }

    async fn apply(self: Box<Self>) -> Result<(), ApplyError> {
        let Plan(steps, m) = *self;
        for step in steps.take() {
            match step {
                Step::Create(id, name, secret) => {
                    if m.create_client(Some(id.clone()), name.as_deref(), secret)
                        .await?
                        .is_none()
                    {
                        // Made meanwhile, through another node or call.
                        return Err(ApplyError::refused(format!(
                            "{KIND} {id}: created meanwhile"
                        )));
                    }
                }
                Step::SetSecret(id, secret) => {
                    m.set_client_secret(&id, secret).await?;
                }
                Step::Delete(id) => {
                    m.delete_client(&id).await?;
                }
            }
        }
        Ok(())
    }
}
