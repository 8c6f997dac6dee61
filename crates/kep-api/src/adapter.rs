//! Wire types of the adapter API, shared by the server, the client crate and the CLI.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// Login methods, as the document's examples spell them.
pub const METHODS: [&str; 2] = ["OAUTH2", "SAML2"];

/// `Kep-File-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum FileType {
    /// Encrypted by DRM; needs release.
    Drm,
    /// An ordinary file; nothing to release.
    Plain,
}

impl FileType {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "DRM" => Some(FileType::Drm),
            "PLAIN" => Some(FileType::Plain),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FileType::Drm => "DRM",
            FileType::Plain => "PLAIN",
        }
    }
}

/// Read back from where it is stored as text.
impl TryFrom<String> for FileType {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        FileType::parse(&s).ok_or_else(|| format!("not a file type: {s}"))
    }
}

/// A DRM session's state (CONTRACT §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum SessionStatus {
    Pending,
    Granted,
    Denied,
    Released,
    Expired,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Pending => "PENDING",
            SessionStatus::Granted => "GRANTED",
            SessionStatus::Denied => "DENIED",
            SessionStatus::Released => "RELEASED",
            SessionStatus::Expired => "EXPIRED",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Granted,
            Self::Denied,
            Self::Released,
            Self::Expired,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }
}

/// Read back from where it is stored as text.
impl TryFrom<String> for SessionStatus {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        SessionStatus::parse(&s).ok_or_else(|| format!("not a session status: {s}"))
    }
}

// ---- the login-method data of the document's tables ----

/// `data_model`: capability information of an org login type.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DataModel {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<UserModel>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<LoginModel>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UserModel {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synchronization: Option<Synchronization>,
}

/// The document names the list `options` in its examples and `active_options` in its
/// table: both are accepted, and both are sent, holding the same array.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Synchronization {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_options: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LoginModel {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth2: Option<OAuth2Login>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saml2: Option<Saml2Login>,
}

/// OAuth 2.0 login data; every field required.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OAuth2Login {
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub response_type: String,
    pub client_id: String,
    pub client_secret: String,
    /// At least one, none blank.
    #[schema(min_items = 1)]
    pub scopes: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MetadataFetchingType {
    FromDatabase,
    FromMetadataLocation,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum SsoServiceBinding {
    Post,
    Redirect,
}

/// SAML 2.0 login data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Saml2Login {
    pub registration_id: String,
    pub entity_id: String,
    pub saml_metadata_fetching_type: MetadataFetchingType,
    /// Required when `saml_metadata_fetching_type` is `FROM_METADATA_LOCATION`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_location: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification_certificate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_certificate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub want_authn_request_signed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sso_service_binding: Option<SsoServiceBinding>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sso_service_location: Option<String>,
}

// ---- operator API (admin listener) ----

/// `POST /admin/v1/adapter/org-login-types` and `PUT …/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OrgLoginTypeRequest {
    /// `OAUTH2` or `SAML2`.
    pub method: String,
    /// Host (and port) of the organisation's agent server, or a full `http(s)://` base URL.
    pub adapter_agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_model: Option<DataModel>,
}

/// `POST /admin/v1/adapter/org-login-types`: an org login type, with the id and secret key
/// the operator gives (a CI's fixed ones), or generated ones.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreateOrgLoginType {
    #[serde(flatten)]
    pub org: OrgLoginTypeRequest,
    /// Generated when absent (the next free one): 1 or more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub id: Option<i64>,
    /// Generated when absent: 8 to 256 printable ASCII characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[ -~]{8,256}$")]
    pub secret_key: Option<String>,
}

impl From<&OrgLoginTypeRequest> for CreateOrgLoginType {
    fn from(org: &OrgLoginTypeRequest) -> Self {
        CreateOrgLoginType {
            org: org.clone(),
            id: None,
            secret_key: None,
        }
    }
}

/// The secret key is shown here once.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct OrgLoginTypeSecret {
    pub id: i64,
    pub secret_key: String,
}

/// An org login type (without its secret): the operator's view, and the fields of
/// `getOrgLoginType`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OrgLoginType {
    pub id: i64,
    pub method: String,
    pub adapter_agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_model: Option<DataModel>,
}

/// `GET /api/trust/login/v0/getOrgLoginType`
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OrgLoginTypeAnswer {
    #[serde(flatten)]
    pub status: Status,
    #[serde(flatten)]
    pub org: OrgLoginType,
}

/// `POST /admin/v1/adapter/drm-requests`
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DrmRequest {
    pub org_login_type_id: i64,
    /// 1 to 1,024 visible ASCII characters, spaces only between them: it travels to the
    /// agent and back as the `Kep-File-Id` header.
    #[schema(max_length = 1024, pattern = "^[!-~]([ -~]*[!-~])?$")]
    pub file_id: String,
    pub file_type: FileType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DrmRequestCreated {
    pub session_id: String,
    pub status: SessionStatus,
}

/// One attempt to notify the agent.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct NotificationAttempt {
    pub attempt: i64,
    /// RFC 3339.
    pub at: String,
    /// The agent's HTTP status, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The released file's record.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ReleasedFile {
    pub size: u64,
    pub sha256: String,
}

/// `GET /admin/v1/adapter/drm-requests/{session}`
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DrmSession {
    pub session_id: String,
    pub org_login_type_id: i64,
    pub file_id: String,
    pub file_type: FileType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    pub status: SessionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub extra: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<ReleasedFile>,
    pub created_at: String,
    pub expires_at: String,
    pub notifications: Vec<NotificationAttempt>,
}

/// `GET /admin/v1/adapter/drm-requests`: which sessions, newest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DrmSessionQuery {
    /// Only this org login type's sessions (an unknown one has none).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::whole::optional_integer"
    )]
    pub org_login_type_id: Option<i64>,
    /// Only sessions in this status, as they are shown: an open session past its expiry is
    /// `EXPIRED`. Text, so that another value is refused naming the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<SessionStatus>)]
    pub status: Option<String>,
    /// At most this many: 1 to 500, default 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    /// Only sessions listed after this one (the last of the previous page); an unknown
    /// session has none after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
}

/// `GET /admin/v1/adapter/drm-requests`: newest first (by creation, then session id).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DrmSessionList {
    pub sessions: Vec<DrmSession>,
}

// ---- agent API (adapter listener) ----

/// `POST /api/trust/drm/v0/uploadResult` body.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UploadResult {
    /// `SUCCESS` or `FAILURE` (`FAILURE` only for a `PLAIN` file).
    #[schema(pattern = "^(SUCCESS|FAILURE)$")]
    pub result: String,
    /// Why; not blank.
    #[schema(pattern = "\\S")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub extra: Option<Value>,
}

/// What the server POSTs to the agent when a DRM release is requested (also sent as the
/// `Kep-AgentSession`, `Kep-File-Id`, `Kep-File-Type` and `Kep-OrgLoginType` headers).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AgentNotification {
    pub session_id: String,
    pub org_login_type_id: i64,
    pub file_id: String,
    pub file_type: FileType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    pub expires_at: String,
}

/// The `{_code, _message}` every adapter answer carries.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Status {
    pub _code: u16,
    pub _message: String,
}

/// The paths of the adapter routes, as the server routes them (`{name}` marks a path
/// parameter) and the client fills them.
pub mod paths {
    pub const ORG_LOGIN_TYPES: &str = "/admin/v1/adapter/org-login-types";
    pub const ORG_LOGIN_TYPE: &str = "/admin/v1/adapter/org-login-types/{id}";
    pub const ORG_LOGIN_TYPE_SECRET_KEY: &str = "/admin/v1/adapter/org-login-types/{id}/secret-key";
    pub const DRM_REQUESTS: &str = "/admin/v1/adapter/drm-requests";
    pub const DRM_REQUEST: &str = "/admin/v1/adapter/drm-requests/{session}";
    pub const DRM_REQUEST_FILE: &str = "/admin/v1/adapter/drm-requests/{session}/file";
    pub const GET_ORG_LOGIN_TYPE: &str = "/api/trust/login/v0/getOrgLoginType";
    pub const UPLOAD_RESULT: &str = "/api/trust/drm/v0/uploadResult";
    pub const UPLOAD_DECRYPTED: &str = "/api/trust/drm/v0/uploadDecrypted";
}
