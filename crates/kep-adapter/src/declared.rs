//! `[[adapter.org_login_types]]` of a declaration: each org login type created with its id
//! and secret key, or changed where its method, agent, data model or key (by its hash)
//! differ; `--prune` deletes the ones not named, with their sessions and files.

use std::collections::HashSet;
use std::sync::Arc;

use kep_api::adapter::{DataModel, OrgLoginTypeRequest};
use kep_api::declared::{Applied, Outcome};
use kep_core::declared::{ApplyError, Declares, Planned, Steps, read_section, secret};
use serde::Deserialize;
use serde_json::Value;

use crate::Adapter;
use crate::ids::OrgLoginTypeId;

const KIND: &str = "adapter.org_login_types";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    #[serde(default)]
    org_login_types: Option<Vec<DeclaredOrg>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeclaredOrg {
    id: OrgLoginTypeId,
    secret_key: String,
    // Spelled out rather than the request flattened: serde's `deny_unknown_fields` does not
    // see through a flattened field.
    method: String,
    adapter_agent: String,
    #[serde(default)]
    data_model: Option<DataModel>,
}

enum Step {
    Create(OrgLoginTypeId, OrgLoginTypeRequest, String),
    Update(OrgLoginTypeId, Option<OrgLoginTypeRequest>, Option<String>),
    Delete(OrgLoginTypeId),
}

pub(crate) struct Declared(pub(crate) Arc<Adapter>);

#[async_trait::async_trait]
impl Declares for Declared {
    fn section(&self) -> &'static str {
        "adapter"
    }

    async fn plan(&self, section: Value, prune: bool) -> Result<Box<dyn Planned>, ApplyError> {
        let Section { org_login_types } = read_section("adapter", section)?;
        let mut steps = Steps::new(KIND);
        let Some(orgs) = org_login_types else {
            return Ok(Box::new(Plan(steps, Arc::clone(&self.0))));
        };
        let stored = self.0.orgs.list().await?;
        for d in orgs {
            let (id, name) = (d.id, d.id.to_string());
            steps.once(&name)?;
            if id.0 < 1 {
                return Err(ApplyError::refused(format!("{KIND} {name}: id: 1 or more")));
            }
            let key = secret(KIND, &name, "secret_key", d.secret_key)?;
            let org = OrgLoginTypeRequest {
                method: d.method,
                adapter_agent: d.adapter_agent,
                data_model: d.data_model,
            };
            let org = crate::orgs::validate(org)
                .map_err(|e| ApplyError::refused(format!("{KIND} {name}: {e}")))?;
            let Some(now) = stored.iter().find(|o| o.id == id.0) else {
                steps.push(name, Outcome::Created, Some(Step::Create(id, org, key)));
                continue;
            };
            let fields_differ = now.method != org.method
                || now.adapter_agent != org.adapter_agent.trim()
                || serde_json::to_value(&now.data_model).ok()
                    != serde_json::to_value(&org.data_model).ok();
            let key_differs = self.0.orgs.authenticate(id, &key).await?.is_none();
            if !fields_differ && !key_differs {
                steps.push(name, Outcome::Unchanged, None);
                continue;
            }
            let step = Step::Update(id, fields_differ.then_some(org), key_differs.then_some(key));
            steps.push(name, Outcome::Changed, Some(step));
        }
        if prune {
            let named: HashSet<String> = steps.outcomes().into_iter().map(|a| a.id).collect();
            for o in stored.iter().filter(|o| !named.contains(&o.id.to_string())) {
                let id = OrgLoginTypeId(o.id);
                steps.push(o.id.to_string(), Outcome::Deleted, Some(Step::Delete(id)));
            }
        }
        Ok(Box::new(Plan(steps, Arc::clone(&self.0))))
    }
}

struct Plan(Steps<Step>, Arc<Adapter>);

#[async_trait::async_trait]
impl Planned for Plan {
    fn outcomes(&self) -> Vec<Applied> {
        self.0.outcomes()
    }

    async fn apply(self: Box<Self>) -> Result<(), ApplyError> {
        let Plan(steps, adapter) = *self;
        for step in steps.take() {
            match step {
                Step::Create(id, org, key) => {
                    if adapter.orgs.create(&org, Some(id), key).await?.is_none() {
                        return Err(ApplyError::refused(format!(
                            "{KIND} {id}: created meanwhile"
                        )));
                    }
                }
                Step::Update(id, org, key) => {
                    if let Some(org) = org {
                        adapter.orgs.update(id, &org).await?;
                    }
                    if let Some(key) = key {
                        adapter.orgs.set_key(id, key).await?;
                    }
                }
                Step::Delete(id) => {
                    if let Some(sessions) = adapter.orgs.delete(id).await? {
                        adapter.drm.forget_files(&sessions).await;
                    }
                }
            }
        }
        Ok(())
    }
}
