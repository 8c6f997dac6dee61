//! Wire types of the messaging API, shared by the server, the client crate and the CLI.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// `result` / `code_detail` of every answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Detail {
    pub detail_code: String,
    pub detail_message: String,
}

impl Detail {
    pub fn ok(message: &str) -> Self {
        Detail {
            detail_code: "API_200".into(),
            detail_message: message.into(),
        }
    }
}

/// Every refusal of a message call: HTTP status and `code` go together (401 and `400`,
/// 400 and `410` or `420`, 413 and `420`, 404 and `404`, 500 and `500`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorAnswer {
    pub code: String,
    /// A send's `cid`, when its body had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cid: Option<String>,
    pub result: Detail,
}

/// A refusal of the detail calls (`GET /v2/info/{rcs|message}/search/detail/{uid}`), whose
/// answers name their detail `code_detail`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DetailErrorAnswer {
    pub code: String,
    pub code_detail: Detail,
}

/// A refusal of the searches (`/v2/info/message/search`, `/v2/info/rcs/search`), in their
/// answers' shape: `status` (which the seed requires of them) beside `code`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SearchErrorAnswer {
    pub status: String,
    pub code: String,
    pub code_detail: Detail,
}

/// A refusal of the token endpoint (RFC 6749 §5.2).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OAuthErrorAnswer {
    /// `invalid_request`, `invalid_client`, `unsupported_grant_type` or `server_error`.
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_description: Option<String>,
}

/// `POST /v2/oauth/token` answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenAnswer {
    pub access_token: String,
    pub token_type: String,
    pub expires_in: u64,
}

/// `POST /v2/send/xms` (and RCS) answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SendAnswer {
    pub code: String,
    pub uid: String,
    pub cid: String,
    pub result: Detail,
}

/// `POST /v2/info/message/search` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct XmsSearch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(format = Date)]
    pub start_date: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(format = Date)]
    pub end_date: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000)]
    pub size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[0-9]{20}$")]
    pub last_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etc1: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etc2: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<String>,
}

/// One row of an XMS search.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct XmsSearchRow {
    pub uid: String,
    pub cid: String,
    pub reg_date: String,
    pub status_code: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sms_status_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tax_cd1: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tax_cd2: Option<String>,
    #[serde(flatten)]
    pub etc: std::collections::BTreeMap<String, String>,
}

/// `POST /v2/info/message/search` answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct XmsSearchAnswer {
    pub status: String,
    pub code: String,
    /// Results on this page.
    pub count: i64,
    pub next: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_uid: Option<String>,
    pub code_detail: Detail,
    pub results: Vec<XmsSearchRow>,
}

/// `GET /v2/info/message/search/detail/{uid}` answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct XmsDetailAnswer {
    pub code: String,
    pub code_detail: Detail,
    #[schema(value_type = Object)]
    pub result: serde_json::Map<String, serde_json::Value>,
}

// ---- operator API ----

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct CreateClient {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Generated when absent: 1 to 64 letters and digits (it travels in `id:secret`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[A-Za-z0-9]{1,64}$")]
    pub client_id: Option<String>,
    /// Generated when absent: 8 to 256 printable ASCII characters (a CI's fixed secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[ -~]{8,256}$")]
    pub client_secret: Option<String>,
}

/// The secret is shown here once.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ClientSecret {
    pub client_id: String,
    pub client_secret: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ClientSummary {
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// One hand-over to the carrier, as `GET /admin/v1/messaging/outbox` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OutboxEntry {
    pub id: i64,
    pub uid: String,
    pub route: String,
    pub phone_number: String,
    #[schema(value_type = Object)]
    pub payload: serde_json::Value,
    pub outcome: String,
    pub at: String,
}

/// A carrier messages leave through, as `GET /admin/v1/messaging/carriers` shows it: the
/// configured ones in the order they are tried, then the simulator, which takes what none
/// of them takes.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CarrierStatus {
    pub name: String,
    /// `simulator`, `smpp` or `http`.
    pub kind: String,
    /// `up`; for an SMPP carrier `connecting` while it is not bound, `stopped` after an unbind.
    pub state: String,
    /// Hand-overs tried since the node started, and those the carrier acknowledged.
    pub submitted: u64,
    pub acknowledged: u64,
    /// `submit_sm` awaiting their response now (SMPP).
    pub window_in_use: u64,
    /// Binds lost and made again (SMPP).
    pub reconnects: u64,
    /// `submit_sm` the SMSC answered `ESME_RTHROTTLED` or `ESME_RMSGQFUL` (sent again after a
    /// pause).
    pub throttled: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// `GET /admin/v1/messaging/messages` query: filters that all apply (AND), across every
/// client unless `clientId` names one.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MessageQuery {
    /// Only this API client's messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Only messages to this number, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phone_number: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(pattern = "^(100|200|510|520)$")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(pattern = "^(XMS|RCS)$")]
    pub channel: Option<String>,
    /// Only messages older than this uid: the last uid of the page before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(pattern = "^[0-9]{20}$")]
    pub before: Option<String>,
    /// 1 to 500, default 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

/// One message as the operator's lists show it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MessageSummary {
    pub uid: String,
    pub client_id: String,
    pub cid: String,
    /// `XMS` or `RCS`.
    pub channel: String,
    pub message_type: String,
    pub phone_number: String,
    /// `100` (accepted, not final yet), `200`, `510` or `520`.
    pub status: String,
    /// How many times the dispatcher took it up for delivery.
    pub attempts: i64,
    pub reg_date: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub res_date: Option<String>,
}

/// `GET /admin/v1/messaging/messages` answer, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MessageList {
    pub messages: Vec<MessageSummary>,
}

/// What happened to a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TimelineEvent {
    /// Stored, status `100`.
    Accepted,
    /// Given to a carrier: one per hand-over (an RCS fallback is a second).
    HandedOver,
    /// At its final status.
    Finished,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TimelineEntry {
    pub at: String,
    pub event: TimelineEvent,
    /// The message's status from then on (`accepted`, `finished`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// What was handed over (`handed_over`): `XMS`, `RCS`, `FALLBACK_SM` or `FALLBACK_LM`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// What the carrier made of it (`handed_over`): `API_200`, `API_510` or `API_520`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// The carrier connector it was handed to (`handed_over`): `simulator` for the
    /// built-in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carrier: Option<String>,
}

/// `GET /admin/v1/messaging/messages/{uid}` answer: the message, its accepted body, its
/// results and what happened to it, in time order.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MessageTimeline {
    pub message: MessageSummary,
    /// The accepted body, as the client sent it.
    #[schema(value_type = Object)]
    pub request: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcs_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sms_status_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// The RCS result group that holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_group_id: Option<String>,
    pub timeline: Vec<TimelineEntry>,
}

/// `GET /admin/v1/messaging/report-groups` query.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReportGroupQuery {
    /// Only this API client's groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// 1 to 500, default 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

/// An RCS result group: results handed out together by `GET /v2/info/rcs/results`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ReportGroup {
    pub report_group_id: String,
    pub client_id: String,
    pub created_at: String,
    /// Not completed by then, its results go back to the pool.
    pub lease_until: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// The messages it holds.
    pub results: i64,
}

/// `GET /admin/v1/messaging/report-groups` answer, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ReportGroupList {
    pub report_groups: Vec<ReportGroup>,
}

// ---- RCS ----

/// One result of `GET /v2/info/rcs/results`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RcsResult {
    pub uid: String,
    pub client_id: String,
    pub cid: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcs_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_status: Option<String>,
}

/// `GET|POST /v2/info/rcs/results` answer; no group when nothing is pending.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RcsResultsAnswer {
    pub code: String,
    pub code_detail: Detail,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_group_id: Option<String>,
    pub results: Vec<RcsResult>,
}

/// `PUT /v2/info/rcs/results/complete/{report_group_id}` answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CodeAnswer {
    pub code: String,
    pub code_detail: Detail,
}

/// `POST|GET /v2/info/rcs/search` fields (a body, or the query string).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RcsSearch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(format = Date)]
    pub start_date: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(format = Date)]
    pub end_date: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000)]
    pub size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[0-9]{20}$")]
    pub last_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^(RCSSMS|RCSLMS|RCSMMS|RCSTMPL)$")]
    pub service_type: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RcsSearchRow {
    pub uid: String,
    pub cid: String,
    pub reg_date: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcs_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tax_cd1: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tax_cd2: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RcsSearchAnswer {
    pub status: String,
    pub code: String,
    pub count: i64,
    pub next: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_uid: Option<String>,
    pub code_detail: Detail,
    pub results: Vec<RcsSearchRow>,
}

/// `POST /v2/upload/rcs` answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RcsUploadAnswer {
    pub code: String,
    pub result: Detail,
    pub file_id: String,
    /// `maapfile://<file_id>`, for `body[].media`.
    pub url: String,
    pub expiry_date: String,
}

/// `POST /v2/upload/message/mms/files` answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MmsUploadAnswer {
    pub code: String,
    pub result: Detail,
    pub content_group_id: String,
}

/// The paths of the messaging routes, as the server routes them (`{name}` marks a path
/// parameter) and the client fills them.
pub mod paths {
    pub const CLIENTS: &str = "/admin/v1/messaging/clients";
    pub const CLIENT: &str = "/admin/v1/messaging/clients/{id}";
    pub const CLIENT_SECRET: &str = "/admin/v1/messaging/clients/{id}/secret";
    pub const OUTBOX: &str = "/admin/v1/messaging/outbox";
    pub const CARRIERS: &str = "/admin/v1/messaging/carriers";
    pub const MESSAGES: &str = "/admin/v1/messaging/messages";
    pub const MESSAGE: &str = "/admin/v1/messaging/messages/{uid}";
    pub const REPORT_GROUPS: &str = "/admin/v1/messaging/report-groups";
    pub const TOKEN: &str = "/v2/oauth/token";
    pub const SEND_XMS: &str = "/v2/send/xms";
    pub const SEND_RCS: &str = "/v2/send/rcs";
    pub const UPLOAD_RCS: &str = "/v2/upload/rcs";
    pub const UPLOAD_MMS: &str = "/v2/upload/message/mms/files";
    pub const RCS_RESULTS: &str = "/v2/info/rcs/results";
    pub const RCS_RESULTS_COMPLETE: &str = "/v2/info/rcs/results/complete/{report_group_id}";
    pub const RCS_SEARCH: &str = "/v2/info/rcs/search";
    pub const RCS_DETAIL: &str = "/v2/info/rcs/search/detail/{uid}";
    pub const XMS_SEARCH: &str = "/v2/info/message/search";
    pub const XMS_DETAIL: &str = "/v2/info/message/search/detail/{uid}";
}
