//! The wire of every kep API: request and answer bodies, error bodies and their OpenAPI
//! schemas, one module per service. Servers, the typed client and the CLI share these
//! types; nothing here knows a server framework or a database, so a client links only
//! serde and utoipa.

pub mod adapter;
pub mod live;
pub mod messaging;
pub mod operator;
pub mod serving;
