//! The real `kep` binary, driven as a client drives it: one test binary, a module per area.

mod common;
mod crash_recovery;
mod isolation;
mod serve;
mod several_nodes;
mod walkthroughs;
