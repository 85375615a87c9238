//! skewscope's collector: reads agent and probe logs, joins them and reports
//! skew, latency, fan-out and loss; also runs the embedded demo.
//!
//! `report` needs only the core, so the collector builds for any OS with
//! `--no-default-features`; the `demo` feature (on by default) adds the
//! embedded demo, which runs a real agent and real probes in-process.

#![forbid(unsafe_code)]

pub mod audit;
#[cfg(feature = "demo")]
pub mod demo;
pub mod html;
pub mod inputs;
pub mod joined;
pub mod log_files;
pub mod matching;
pub mod reference;
pub mod sentences;
#[cfg(feature = "demo")]
pub mod sweep;
pub mod table;
pub mod verdict_lines;
pub mod window_args;
#[cfg(feature = "demo")]
pub mod work_dir;

/// The JSON Schema of the report `--json` writes, generated from the types
/// so the documented shape cannot drift from the code.
pub fn report_schema() -> String {
    let schema = schemars::schema_for!(skewscope_core::analysis::report::Report);
    serde_json::to_string_pretty(&schema).expect("a schema serialises") + "\n"
}
