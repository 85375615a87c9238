//! skewscope's core: what every part writes and how it is read back, and the
//! pure math that turns records into a skew report.
//!
//! Nothing here does I/O of its own or reads a clock: timestamps come in as
//! arguments ([`Stamp`] is plain data), byte streams as `&[u8]` or
//! `impl Write`. That keeps the decoders fuzzable and the analysis testable
//! with hand-built records. Every syscall, opening a file included, lives in
//! the `skewscope-os` crate (log files: `skewscope_os::log_files`).
//!
//! - records and their framing: [`stamp`], [`record`], [`log`];
//! - what crosses the network, as bytes: [`identity`] (which broadcast a
//!   payload is), [`time_exchange`] (the UDP time packets),
//!   [`client_frames`] (what WebSocket clients send a hub), [`server_frames`]
//!   (what a server sends its clients), [`permessage_deflate`] (compressed
//!   messages and the handshake that agrees on them), [`chrony`] (what
//!   `chronyc` prints), [`ingest`] (probes uploading their records) and
//!   [`page_ingest`] (its JSON dialect, spoken by the browser probe page);
//! - the protocols a probe speaks over its connection besides plain
//!   WebSocket messages, each a sans-IO layer ([`protocol_layer`]):
//!   [`socketio`], [`stomp`], [`mqtt`], and [`sse`] (an HTTP event stream);
//! - [`tap`]: an unmodified server's outgoing TCP segments read back into
//!   the WebSocket messages it sent each client, with capture times;
//! - [`units`]: durations and sizes as written in flags;
//! - [`act_at`]: the time to act a broadcast carries, and where;
//!   [`act_stamp`]: the hub writing one into an app's payload;
//! - [`clock`]: the clock model, one definition for the probe, the live
//!   join and the report (and ported to JavaScript);
//! - the [`analysis`]: joining, the figures and the report.

#![forbid(unsafe_code)]
// No `as` that can wrap, truncate or lose a sign outside tests: a figure
// converts through `convert`, whose rule is said once, or a cast says why
// it cannot lose anything.
#![cfg_attr(
    not(test),
    deny(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_possible_wrap
    )
)]

pub mod act_at;
pub mod act_notice;
pub mod act_stamp;
pub mod analysis;
pub mod chrony;
pub mod client_frames;
pub mod clock;
pub mod control_rate;
pub mod convert;
#[cfg(any(test, feature = "test-support"))]
pub mod fixtures;
pub mod identity;
pub mod ingest;
pub mod json_pointer;
pub mod lead;
pub mod log;
pub mod mqtt;
pub mod page_ingest;
pub mod permessage_deflate;
pub mod protocol_layer;
pub mod record;
pub mod retention;
pub mod run_owner;
pub mod server_frames;
pub mod socketio;
pub mod sse;
pub mod stamp;
pub mod stomp;
pub mod tap;
pub mod time_exchange;
pub mod units;

pub use stamp::Stamp;
