//! An org login type's data model as stored (`org_login_types.data_model`). Its types are
//! the store's own, in the JSON form the API's had when they were stored, so that a change
//! of the API is not a migration; the org login types convert at their edge.

use kep_api::adapter as api;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct DataModel {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) user: Option<UserModel>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) login: Option<LoginModel>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct UserModel {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) synchronization: Option<Synchronization>,
}

/// Both names of the one list, as the API writes them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Synchronization {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) options: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) active_options: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LoginModel {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) oauth2: Option<OAuth2Login>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) saml2: Option<Saml2Login>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct OAuth2Login {
    pub(crate) authorization_endpoint: String,
    pub(crate) token_endpoint: String,
    pub(crate) response_type: String,
    pub(crate) client_id: String,
    pub(crate) client_secret: String,
    pub(crate) scopes: Vec<String>,
}

/// `FROM_DATABASE` or `FROM_METADATA_LOCATION`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum MetadataFetchingType {
    FromDatabase,
    FromMetadataLocation,
}

/// `POST` or `REDIRECT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum SsoServiceBinding {
    Post,
    Redirect,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Saml2Login {
    pub(crate) registration_id: String,
    pub(crate) entity_id: String,
    pub(crate) saml_metadata_fetching_type: MetadataFetchingType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) metadata_location: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) verification_certificate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) encryption_certificate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) want_authn_request_signed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sso_service_binding: Option<SsoServiceBinding>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sso_service_location: Option<String>,
}

// Every field is destructured, so a field added to the API fails to compile here until it
// is decided whether it is stored.

impl From<api::DataModel> for DataModel {
    fn from(d: api::DataModel) -> Self {
        let api::DataModel { user, login } = d;
        DataModel {
            user: user.map(|api::UserModel { synchronization }| UserModel {
                synchronization: synchronization.map(
                    |api::Synchronization {
                         options,
                         active_options,
                     }| Synchronization {
                        options,
                        active_options,
                    },
                ),
            }),
            login: login.map(|api::LoginModel { oauth2, saml2 }| LoginModel {
                oauth2: oauth2.map(OAuth2Login::from),
                saml2: saml2.map(Saml2Login::from),
            }),
        }
    }
}

impl From<DataModel> for api::DataModel {
    fn from(d: DataModel) -> Self {
        let DataModel { user, login } = d;
        api::DataModel {
            user: user.map(|UserModel { synchronization }| api::UserModel {
                synchronization: synchronization.map(
                    |Synchronization {
                         options,
                         active_options,
                     }| api::Synchronization {
                        options,
                        active_options,
                    },
                ),
            }),
            login: login.map(|LoginModel { oauth2, saml2 }| api::LoginModel {
                oauth2: oauth2.map(api::OAuth2Login::from),
                saml2: saml2.map(api::Saml2Login::from),
            }),
        }
    }
}

impl From<api::OAuth2Login> for OAuth2Login {
    fn from(o: api::OAuth2Login) -> Self {
        let api::OAuth2Login {
            authorization_endpoint,
            token_endpoint,
            response_type,
            client_id,
            client_secret,
            scopes,
        } = o;
        OAuth2Login {
            authorization_endpoint,
            token_endpoint,
            response_type,
            client_id,
            client_secret,
            scopes,
        }
    }
}

impl From<OAuth2Login> for api::OAuth2Login {
    fn from(o: OAuth2Login) -> Self {
        let OAuth2Login {
            authorization_endpoint,
            token_endpoint,
            response_type,
            client_id,
            client_secret,
            scopes,
        } = o;
        api::OAuth2Login {
            authorization_endpoint,
            token_endpoint,
            response_type,
            client_id,
            client_secret,
            scopes,
        }
    }
}

impl From<api::Saml2Login> for Saml2Login {
    fn from(s: api::Saml2Login) -> Self {
        let api::Saml2Login {
            registration_id,
            entity_id,
            saml_metadata_fetching_type,
            metadata_location,
            verification_certificate,
            encryption_certificate,
            want_authn_request_signed,
            sso_service_binding,
            sso_service_location,
        } = s;
        Saml2Login {
            registration_id,
            entity_id,
            saml_metadata_fetching_type: saml_metadata_fetching_type.into(),
            metadata_location,
            verification_certificate,
            encryption_certificate,
            want_authn_request_signed,
            sso_service_binding: sso_service_binding.map(Into::into),
            sso_service_location,
        }
    }
}

impl From<Saml2Login> for api::Saml2Login {
    fn from(s: Saml2Login) -> Self {
        let Saml2Login {
            registration_id,
            entity_id,
            saml_metadata_fetching_type,
            metadata_location,
            verification_certificate,
            encryption_certificate,
            want_authn_request_signed,
            sso_service_binding,
            sso_service_location,
        } = s;
        api::Saml2Login {
            registration_id,
            entity_id,
            saml_metadata_fetching_type: saml_metadata_fetching_type.into(),
            metadata_location,
            verification_certificate,
            encryption_certificate,
            want_authn_request_signed,
            sso_service_binding: sso_service_binding.map(Into::into),
            sso_service_location,
        }
    }
}

impl From<api::MetadataFetchingType> for MetadataFetchingType {
    fn from(t: api::MetadataFetchingType) -> Self {
        match t {
            api::MetadataFetchingType::FromDatabase => MetadataFetchingType::FromDatabase,
            api::MetadataFetchingType::FromMetadataLocation => {
                MetadataFetchingType::FromMetadataLocation
            }
        }
    }
}

impl From<MetadataFetchingType> for api::MetadataFetchingType {
    fn from(t: MetadataFetchingType) -> Self {
        match t {
            MetadataFetchingType::FromDatabase => api::MetadataFetchingType::FromDatabase,
            MetadataFetchingType::FromMetadataLocation => {
                api::MetadataFetchingType::FromMetadataLocation
            }
        }
    }
}

impl From<api::SsoServiceBinding> for SsoServiceBinding {
    fn from(b: api::SsoServiceBinding) -> Self {
        match b {
            api::SsoServiceBinding::Post => SsoServiceBinding::Post,
            api::SsoServiceBinding::Redirect => SsoServiceBinding::Redirect,
        }
    }
}

impl From<SsoServiceBinding> for api::SsoServiceBinding {
    fn from(b: SsoServiceBinding) -> Self {
        match b {
            SsoServiceBinding::Post => api::SsoServiceBinding::Post,
            SsoServiceBinding::Redirect => api::SsoServiceBinding::Redirect,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field filled, both list names and both login methods.
    fn full() -> api::DataModel {
        api::DataModel {
            user: Some(api::UserModel {
                synchronization: Some(api::Synchronization {
                    options: Some(vec!["email".into(), "name".into()]),
                    active_options: Some(vec!["email".into(), "name".into()]),
                }),
            }),
            login: Some(api::LoginModel {
                oauth2: Some(api::OAuth2Login {
                    authorization_endpoint: "https://idp.example/authorize".into(),
                    token_endpoint: "https://idp.example/token".into(),
                    response_type: "code".into(),
                    client_id: "kep".into(),
                    client_secret: "s3cret".into(),
                    scopes: vec!["openid".into(), "email".into()],
                }),
                saml2: Some(api::Saml2Login {
                    registration_id: "idp".into(),
                    entity_id: "https://kep.example/saml".into(),
                    saml_metadata_fetching_type: api::MetadataFetchingType::FromMetadataLocation,
                    metadata_location: Some("https://idp.example/metadata".into()),
                    verification_certificate: Some("VERIFY".into()),
                    encryption_certificate: Some("ENCRYPT".into()),
                    want_authn_request_signed: Some(true),
                    sso_service_binding: Some(api::SsoServiceBinding::Redirect),
                    sso_service_location: Some("https://idp.example/sso".into()),
                }),
            }),
        }
    }

    /// The same with every optional field left out and the other enum values.
    fn sparse() -> api::DataModel {
        api::DataModel {
            user: Some(api::UserModel {
                synchronization: Some(api::Synchronization::default()),
            }),
            login: Some(api::LoginModel {
                oauth2: None,
                saml2: Some(api::Saml2Login {
                    registration_id: "idp".into(),
                    entity_id: "https://kep.example/saml".into(),
                    saml_metadata_fetching_type: api::MetadataFetchingType::FromDatabase,
                    metadata_location: None,
                    verification_certificate: None,
                    encryption_certificate: None,
                    want_authn_request_signed: None,
                    sso_service_binding: Some(api::SsoServiceBinding::Post),
                    sso_service_location: None,
                }),
            }),
        }
    }

    /// Rows written before the store had its own types read back as they were written.
    #[test]
    fn rows_stored_from_the_api_type_read_back() {
        for wire in [full(), sparse(), api::DataModel::default()] {
            let stored_json = serde_json::to_string(&wire).unwrap();
            let stored: DataModel = serde_json::from_str(&stored_json).unwrap();
            assert_eq!(api::DataModel::from(stored), wire, "{stored_json}");
        }
    }

    /// New rows are written in the same JSON as the old ones, so the column holds one format.
    #[test]
    fn stored_type_writes_the_api_type_s_json() {
        for wire in [full(), sparse(), api::DataModel::default()] {
            let before = serde_json::to_string(&wire).unwrap();
            let stored = DataModel::from(wire);
            assert_eq!(serde_json::to_string(&stored).unwrap(), before);
        }
        let json = serde_json::to_value(DataModel::from(full())).unwrap();
        let saml2 = &json["login"]["saml2"];
        assert_eq!(
            saml2["saml_metadata_fetching_type"],
            "FROM_METADATA_LOCATION"
        );
        assert_eq!(saml2["sso_service_binding"], "REDIRECT");
        assert_eq!(
            json["user"]["synchronization"]["active_options"][0],
            "email"
        );
    }
}
