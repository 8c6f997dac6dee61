//! The live API end to end: JSON-RPC over HTTP and participants over real WebSockets.

mod activity;
mod common;
mod limits;
mod media;
mod operator;
mod rooms;
mod rpc;
mod tokens;
mod webhooks;
