//! What the kep services truly share: settings loading, the embedded database, ids and
//! secret hashing, the operator API's error shape and auth, the per-client limits and the
//! listener plumbing.

pub mod activity;
pub mod clock;
pub mod cluster;
pub mod declared;
pub mod docs;
pub mod http;
pub mod id;
pub mod json;
pub mod limits;
pub mod listener;
pub mod outbound;
pub mod outbox;
pub mod platform;
pub mod private;
pub mod readiness;
pub mod retry;
pub mod seal;
pub mod secret;
pub mod service;
pub mod settings;
pub mod storage;
pub mod tls;
