//! skewscope's shared core: the record types every part writes, the log file
//! format they are written in, and the pure math that turns records into a
//! skew report.
//!
//! Everything except [`sys`] (clocks, host name, file limit) and the file helpers
//! in [`log`] is sans-IO: it takes
//! timestamps and records as arguments, so the joining and skew math can be
//! unit-tested with hand-built records.

pub mod clock;
pub mod clockstate;
pub mod config;
pub mod identity;
pub mod join;
pub mod log;
pub mod record;
pub mod report;
pub mod stats;
pub mod sys;
pub mod timeproto;
pub mod timesync;
pub mod timing;
pub mod triggers;

pub use clock::Stamp;
