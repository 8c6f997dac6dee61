//! Wire types and handlers: the management API on the admin listener. The gateway's one
//! handler lives with the gateway.

pub mod operator;
