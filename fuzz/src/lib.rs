//! The fuzz targets' bodies: one function per decoder that reads bytes from
//! outside skewscope (a peer, a file, a captured packet, a command's
//! output), each asserting what that decoder promises beyond "no panic":
//! that nothing is silently lost, that reading in pieces gives what
//! reading at once gives, that output stays within its limit.
//!
//! They live in an ordinary workspace crate so that `cargo test` replays the
//! committed corpus (`fuzz/corpus/<target>/`) through exactly the code the
//! fuzzer runs; `fuzz/libfuzzer` wraps each in a libFuzzer entry point for
//! `cargo fuzz` (docs/fuzzing.md).

#![forbid(unsafe_code)]

mod chunks;
mod targets;

pub use targets::tap::{TAP_PORT, capture, packets};
pub use targets::*;

/// A fuzz target's body: it panics when its decoder breaks a promise.
pub type Target = fn(&[u8]);

/// Every target by name: the corpus directory it reads and the function it
/// runs. The replay test and the seed writer go through this list, so a
/// target added here is replayed without another change.
pub const TARGETS: &[(&str, Target)] = &[
    ("log_body", log_body),
    ("client_frames", client_frames),
    ("server_frames", server_frames),
    ("tap", tap),
    ("inflate", inflate),
    ("time_exchange", time_exchange),
    ("clock_json", clock_json),
    ("ingest", ingest),
    ("page_ingest", page_ingest),
    ("http_head", http_head),
    ("chrony", chrony),
    ("act_at", act_at),
    ("clock_model", clock_model),
    ("socketio", socketio),
    ("stomp", stomp),
    ("mqtt", mqtt),
    ("sse", sse),
];
