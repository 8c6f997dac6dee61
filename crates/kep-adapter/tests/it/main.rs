//! The adapter API end to end: a real server on port 0, and a real agent (an HTTP server on
//! port 0) that receives the notification and answers with the adapter calls.

mod activity;
mod common;
mod drm;
mod limits;
mod operator;
