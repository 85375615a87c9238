//! `skewscope-probe`: parse the flags, run one probe, stop it on SIGINT/SIGTERM,
//! print a one-line summary. Everything else lives in the `probe` library.

use std::process::ExitCode;

use anyhow::Context;
use probe::RunningProbe;
use probe::cli::Args;
use tokio::signal::unix::{SignalKind, signal};

fn main() -> ExitCode {
    // A bad config file, key or value stops here, before anything is opened.
    let args = match skewscope_os::settings::from_command_line::<Args>() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("skewscope-probe: {e}");
            return ExitCode::from(2);
        }
    };
    if args.print_config {
        print!("{}", skewscope_os::settings::print(&args));
        return ExitCode::SUCCESS;
    }
    if let Err(e) =
        skewscope_os::logging::init(args.log.as_deref(), skewscope_os::logging::DEFAULT_FILTER)
    {
        eprintln!("skewscope-probe: {e}");
        return ExitCode::from(2);
    }
    let config = match args.into_config() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(target: "probe", "{e}");
            return ExitCode::from(2);
        }
    };
    match run(config) {
        Ok(summary) if summary.upload_incomplete() => {
            tracing::error!(
                target: "probe",
                "{summary}. Start the probe again with the same --out (or --out-dir) and \
                 --upload once the agent is reachable: it uploads earlier runs' logs first"
            );
            ExitCode::from(probe::UPLOAD_INCOMPLETE_EXIT)
        }
        Ok(summary) => {
            tracing::info!(target: "probe", "{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(target: "probe", "{}", said_once(&e));
            ExitCode::FAILURE
        }
    }
}

fn run(config: probe::ProbeConfig) -> anyhow::Result<probe::RunSummary> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("skewscope-probe")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        // Install the handlers before connecting, so a signal can never kill the
        // process with received messages still unwritten.
        let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
        let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
        let mut hangup = signal(SignalKind::hangup()).context("cannot handle SIGHUP")?;
        let line = probe::start_line(&config);
        let probe = RunningProbe::start(config).await?;
        tracing::info!(target: "probe", "{line}");
        let stop = probe.stop_handle();
        let reopen = probe.reopen_handle();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = terminate.recv() => break,
                    _ = interrupt.recv() => break,
                    _ = hangup.recv() => reopen.reopen(),
                }
            }
            stop.stop();
        });
        Ok(probe.finish().await?)
    })
}

/// `e` and its causes, each said once: a cause whose text the error
/// before it already includes (`{path}: {source}`) is not said again.
fn said_once(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}
