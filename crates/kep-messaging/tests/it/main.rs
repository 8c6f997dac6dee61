//! The messaging API end to end on a real server: tokens, XMS and RCS sends through the
//! delivery pipeline, uploads, search and detail.

mod activity;
mod carriers;
mod common;
mod edges;
mod jasmin;
mod limits;
mod operator;
mod rcs;
mod second_reading;
mod tokens;
mod uploads;
mod xms;
