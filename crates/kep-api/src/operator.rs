//! The operator API's error shape, the same for every service on the admin listener:
//! `{"error": {"code", "message", "field"?}}`.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The operator API's error body.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable machine-readable code such as `invalid_field` or `not_found`.
    #[schema(value_type = String)]
    pub code: Cow<'static, str>,
    pub message: String,
    /// The request field at fault, where there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}
