//! The serving service end to end on a real server: one test binary, a module per area.

mod activity;
mod common;
mod limits;
mod monitoring;
mod serving;
