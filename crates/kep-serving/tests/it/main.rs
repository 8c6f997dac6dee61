//! The serving service end to end on a real server: one test binary, a module per area.

mod activity;
mod common;
mod containers;
mod gateway;
mod images;
mod limits;
mod monitoring;
mod podman;
mod rules;
mod second_reading;
mod serving;
