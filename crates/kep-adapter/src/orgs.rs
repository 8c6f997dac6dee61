//! Org login types: validation of the document's field tables, and the secret key.

use std::sync::Arc;

use kep_core::activity::ServiceActivity;
use kep_core::clock::Clock;
use kep_core::secret::{constant_time_eq, new_secret, sha256_hex};
use serde_json::{Value, json};

use crate::AdapterError;
use crate::ids::{OrgLoginTypeId, SessionId};
use crate::store::{NewOrg, OrgRow, Store};
use kep_api::adapter::{
    DataModel, METHODS, MetadataFetchingType, OrgLoginType, OrgLoginTypeRequest, OrgLoginTypeSecret,
};

/// The org login types: registered by the operator, each with a secret key its agent
/// presents (kept as a hash only).
pub struct Orgs {
    store: Arc<dyn Store>,
    clock: Clock,
    activity: ServiceActivity,
}

impl Orgs {
    pub fn new(store: Arc<dyn Store>, clock: Clock, activity: ServiceActivity) -> Self {
        Orgs {
            store,
            clock,
            activity,
        }
    }

    /// Records a change of the org login type (no secret: its key never is).
    fn record(&self, event: &str, id: OrgLoginTypeId, detail: Value) {
        self.activity.record(event, &[&id.0], detail);
    }

    /// Registers a validated request; its secret key is shown this once.
    /// A new org login type of `secret_key`, whose id is `given` or the next free one;
    /// `None` when one of the given id exists.
    pub async fn create(
        &self,
        req: &OrgLoginTypeRequest,
        given: Option<OrgLoginTypeId>,
        secret_key: String,
    ) -> sqlx::Result<Option<OrgLoginTypeSecret>> {
        let now = self.clock.unix_s();
        let Some(id) = self
            .store
            .insert_org(&written(req), given, &sha256_hex(&secret_key), now)
            .await?
        else {
            return Ok(None);
        };
        let detail = json!({ "method": req.method, "adapterAgent": req.adapter_agent });
        self.record("org_login_type.created", id, detail);
        Ok(Some(OrgLoginTypeSecret {
            id: id.0,
            secret_key,
        }))
    }

    pub async fn list(&self) -> sqlx::Result<Vec<OrgLoginType>> {
        Ok(self.store.orgs().await?.into_iter().map(view).collect())
    }

    pub async fn show(&self, id: OrgLoginTypeId) -> sqlx::Result<Option<OrgLoginType>> {
        Ok(self.store.org(id).await?.map(view))
    }

    /// Replaces method, agent and data model; `None` for an unknown org login type.
    pub async fn update(
        &self,
        id: OrgLoginTypeId,
        req: &OrgLoginTypeRequest,
    ) -> sqlx::Result<Option<OrgLoginType>> {
        if !self
            .store
            .update_org(id, &written(req), self.clock.unix_s())
            .await?
        {
            return Ok(None);
        }
        let detail = json!({ "method": req.method, "adapterAgent": req.adapter_agent });
        self.record("org_login_type.updated", id, detail);
        self.show(id).await
    }

    /// Deletes the org with its sessions; their ids, so their files can go.
    pub async fn delete(&self, id: OrgLoginTypeId) -> sqlx::Result<Option<Vec<SessionId>>> {
        let deleted = self.store.delete_org(id).await?;
        if let Some(sessions) = &deleted {
            let detail = json!({ "sessions": sessions.len() });
            self.record("org_login_type.deleted", id, detail);
        }
        Ok(deleted)
    }

    /// A new secret key, shown this once; the old one stops working.
    pub async fn rotate_key(&self, id: OrgLoginTypeId) -> sqlx::Result<Option<OrgLoginTypeSecret>> {
        self.set_key(id, new_secret()).await
    }

    /// `secret_key` for the org, the old one no longer working; `None` for an unknown org.
    pub async fn set_key(
        &self,
        id: OrgLoginTypeId,
        secret_key: String,
    ) -> sqlx::Result<Option<OrgLoginTypeSecret>> {
        let done = self
            .store
            .set_secret(id, &sha256_hex(&secret_key), self.clock.unix_s())
            .await?;
        if done {
            self.record("org_login_type.key_rotated", id, Value::Null);
        }
        Ok(done.then_some(OrgLoginTypeSecret {
            id: id.0,
            secret_key,
        }))
    }

    /// The org whose secret key was presented; `None` for an unknown org or a wrong key.
    pub async fn authenticate(
        &self,
        id: OrgLoginTypeId,
        key: &str,
    ) -> sqlx::Result<Option<OrgRow>> {
        let org = self.store.org(id).await?;
        Ok(org.filter(|org| constant_time_eq(&sha256_hex(key), &org.secret_hash)))
    }
}

fn written(req: &OrgLoginTypeRequest) -> NewOrg<'_> {
    NewOrg {
        method: &req.method,
        adapter_agent: req.adapter_agent.trim(),
        data_model: req.data_model.clone().map(Into::into),
    }
}

/// An org login type as it is shown, from its row.
pub fn view(row: OrgRow) -> OrgLoginType {
    OrgLoginType {
        id: row.id.0,
        method: row.method,
        adapter_agent: row.adapter_agent,
        data_model: row.data_model.map(|d| d.0.into()),
    }
}

fn required(field: &str, value: &str) -> Result<(), AdapterError> {
    if value.trim().is_empty() {
        return Err(AdapterError::invalid_field(field, "must not be empty"));
    }
    Ok(())
}

/// Checks a request against the document's tables; returns it normalised (`options` and
/// `active_options` both set, to the same array).
pub fn validate(mut req: OrgLoginTypeRequest) -> Result<OrgLoginTypeRequest, AdapterError> {
    if !METHODS.contains(&req.method.as_str()) {
        return Err(AdapterError::invalid_field(
            "method",
            format!("must be one of {}", METHODS.join(", ")),
        ));
    }
    let agent = req.adapter_agent.trim();
    if agent.is_empty() || agent.len() > 255 || agent.contains(char::is_whitespace) {
        return Err(AdapterError::invalid_field(
            "adapter_agent",
            "a host name (host[:port]) or an http(s):// URL",
        ));
    }
    if let Some(dm) = &mut req.data_model {
        normalise(dm)?;
    }
    Ok(req)
}

fn normalise(dm: &mut DataModel) -> Result<(), AdapterError> {
    if let Some(sync) = dm.user.as_mut().and_then(|u| u.synchronization.as_mut()) {
        let list = match (&sync.options, &sync.active_options) {
            (Some(a), Some(b)) if a != b => {
                return Err(AdapterError::invalid_field(
                    "data_model.user.synchronization",
                    "options and active_options name the same list; they differ",
                ));
            }
            (Some(a), _) | (None, Some(a)) => Some(a.clone()),
            (None, None) => None,
        };
        sync.options = list.clone();
        sync.active_options = list;
    }
    let Some(login) = &dm.login else {
        return Ok(());
    };
    if let Some(o) = &login.oauth2 {
        let p = "data_model.login.oauth2";
        required(
            &format!("{p}.authorization_endpoint"),
            &o.authorization_endpoint,
        )?;
        required(&format!("{p}.token_endpoint"), &o.token_endpoint)?;
        required(&format!("{p}.response_type"), &o.response_type)?;
        required(&format!("{p}.client_id"), &o.client_id)?;
        required(&format!("{p}.client_secret"), &o.client_secret)?;
        if o.scopes.is_empty() || o.scopes.iter().any(|s| s.trim().is_empty()) {
            return Err(AdapterError::invalid_field(
                format!("{p}.scopes"),
                "a non-empty list of non-empty scopes",
            ));
        }
    }
    if let Some(s) = &login.saml2 {
        let p = "data_model.login.saml2";
        required(&format!("{p}.registration_id"), &s.registration_id)?;
        required(&format!("{p}.entity_id"), &s.entity_id)?;
        if s.saml_metadata_fetching_type == MetadataFetchingType::FromMetadataLocation
            && s.metadata_location
                .as_deref()
                .is_none_or(|l| l.trim().is_empty())
        {
            return Err(AdapterError::invalid_field(
                format!("{p}.metadata_location"),
                "required when saml_metadata_fetching_type is FROM_METADATA_LOCATION",
            ));
        }
    }
    Ok(())
}

/// The agent's base URL: `adapter_agent` as given when it has a scheme, else `http://`.
pub fn agent_base(adapter_agent: &str) -> String {
    let a = adapter_agent.trim().trim_end_matches('/');
    if a.starts_with("http://") || a.starts_with("https://") {
        a.to_owned()
    } else {
        format!("http://{a}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kep_api::adapter::{Synchronization, UserModel};

    fn req(dm: Option<DataModel>) -> OrgLoginTypeRequest {
        OrgLoginTypeRequest {
            method: "OAUTH2".into(),
            adapter_agent: "agent.example:9000".into(),
            data_model: dm,
        }
    }

    #[test]
    fn either_synchronization_name_fills_both() {
        let dm = DataModel {
            user: Some(UserModel {
                synchronization: Some(Synchronization {
                    options: None,
                    active_options: Some(vec!["email".into()]),
                }),
            }),
            login: None,
        };
        let out = validate(req(Some(dm))).unwrap();
        let sync = out
            .data_model
            .unwrap()
            .user
            .unwrap()
            .synchronization
            .unwrap();
        assert_eq!(sync.options, Some(vec!["email".to_owned()]));
        assert_eq!(sync.active_options, sync.options);
    }

    #[test]
    fn method_and_agent_are_checked() {
        let mut r = req(None);
        r.method = "LDAP".into();
        assert_eq!(
            kep_core::http::ApiError::from(validate(r).unwrap_err())
                .detail
                .field
                .as_deref(),
            Some("method")
        );
        let mut r = req(None);
        r.adapter_agent = "has space".into();
        assert_eq!(
            kep_core::http::ApiError::from(validate(r).unwrap_err())
                .detail
                .field
                .as_deref(),
            Some("adapter_agent")
        );
    }

    #[test]
    fn agent_base_adds_a_scheme_only_when_missing() {
        assert_eq!(agent_base("agent:9000"), "http://agent:9000");
        assert_eq!(agent_base("https://agent/"), "https://agent");
    }
}
