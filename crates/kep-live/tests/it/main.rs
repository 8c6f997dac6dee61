//! The live API end to end: JSON-RPC over HTTP and participants over real WebSockets.

mod activity;
mod clients;
mod common;
mod limits;
mod media;
mod operator;
mod peers;
mod rooms;
mod rpc;
mod second_reading;
mod tokens;
mod webhooks;
