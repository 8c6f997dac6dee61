//! The ESME against the crate's SMSC, and against a scripted peer for what that SMSC never
//! does. One test binary: one link, and every helper used.

mod common;
mod scripted;
mod with_smsc;
