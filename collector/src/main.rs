//! `skewscope`: report on recorded runs, or run the embedded demo.

use std::path::{Path, PathBuf};
#[cfg(feature = "demo")]
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
#[cfg(feature = "demo")]
use collector::demo::{self, DemoOptions};
use collector::{inputs, table};

/// skewscope: how far apart in time your WebSocket clients really receive each
/// broadcast, and why.
#[derive(Parser)]
#[command(name = "skewscope", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Join agent and probe logs and report skew, latency, fan-out and loss.
    Report {
        /// Record logs: one agent run's segments and any number of probe logs;
        /// a directory (an agent's data directory) stands for every log in it
        /// and in its probes/ (the runs probes uploaded).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Also write the report as JSON to this file (`-` for standard output).
        #[arg(long)]
        json: Option<PathBuf>,
        /// When each broadcast was triggered, for latency without an agent log:
        /// one wall-clock time in ns since 1970 per line (`date +%s%N`).
        #[arg(long)]
        triggers: Option<PathBuf>,
    },
    /// Print the JSON Schema of `report --json` (the committed copy is
    /// docs/report.schema.json).
    JsonSchema,
    /// Run an agent and probe connections on loopback, broadcast, and report.
    #[cfg(feature = "demo")]
    Demo {
        /// Probe connections.
        #[arg(long, default_value_t = 100)]
        clients: u32,
        /// Test broadcasts.
        #[arg(long, default_value_t = 20)]
        broadcasts: u32,
        /// Pause between broadcasts (e.g. 100ms, 1s).
        #[arg(long, default_value = "100ms", value_parser = skewscope_core::units::parse_duration)]
        interval: Duration,
        /// Also write the report as JSON to this file (`-` for standard output).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Keep the agent and probe logs in this directory (default: a temporary one, removed).
        #[arg(long)]
        keep: Option<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Report {
            files,
            json,
            triggers,
        } => {
            let triggers = triggers.as_deref().map(inputs::read_triggers).transpose()?;
            let files = inputs::expand(&files)?;
            let report = inputs::report(inputs::read_inputs(&files)?, triggers.as_deref());
            print!("{}", table::render(&report));
            write_json(&report, json.as_deref())
        }
        Command::JsonSchema => {
            print!("{}", collector::report_schema());
            Ok(())
        }
        #[cfg(feature = "demo")]
        Command::Demo {
            clients,
            broadcasts,
            interval,
            json,
            keep,
        } => {
            let options = DemoOptions {
                clients,
                broadcasts,
                interval,
                keep,
            };
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            let (agent_log, probe_log, _temp) = runtime.block_on(demo::run(&options))?;
            let report = inputs::report(
                inputs::read_inputs(&[agent_log.clone(), probe_log.clone()])?,
                None,
            );
            print!("{}", table::render(&report));
            if options.keep.is_some() {
                println!(
                    "\nlogs kept; report again with:\n  skewscope report {} {}",
                    agent_log.display(),
                    probe_log.display()
                );
            }
            write_json(&report, json.as_deref())
        }
    }
}

fn write_json(
    report: &skewscope_core::analysis::report::Report,
    out: Option<&Path>,
) -> anyhow::Result<()> {
    let Some(out) = out else { return Ok(()) };
    let text = serde_json::to_string_pretty(report)? + "\n";
    if out == Path::new("-") {
        print!("{text}");
        Ok(())
    } else {
        std::fs::write(out, text).with_context(|| format!("cannot write {}", out.display()))
    }
}
