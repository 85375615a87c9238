//! `skewscope-agent`: run the hub until SIGINT or SIGTERM, then flush everything.
//!
//! Under systemd (`Type=notify`) it reports ready once it listens, pings the
//! watchdog while every engine thread runs, and on SIGHUP starts a new
//! record segment and reads its TLS certificate and key again.

use std::process::ExitCode;
use std::time::Duration;

use agent::{AgentConfig, RunningAgent};
use sd_notify::NotifyState;
use tokio::signal::unix::{SignalKind, signal};

fn main() -> ExitCode {
    // A bad config file or value stops here, before anything is opened.
    let config = match skewscope_os::settings::from_command_line::<AgentConfig>() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("skewscope-agent: {e}");
            return ExitCode::from(2);
        }
    };
    if config.print_config {
        print!("{}", skewscope_os::settings::print(&config));
        return ExitCode::SUCCESS;
    }
    if let Err(e) =
        skewscope_os::logging::init(config.log.as_deref(), skewscope_os::logging::DEFAULT_FILTER)
    {
        eprintln!("skewscope-agent: {e}");
        return ExitCode::from(2);
    }
    match run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(target: "agent", "{}", said_once(&e));
            ExitCode::FAILURE
        }
    }
}

fn run(config: AgentConfig) -> anyhow::Result<()> {
    // HTTP and upgrades need little; the shards have their own threads.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut hup = signal(SignalKind::hangup())?;
        let token = config.token_file.clone();
        let agent = RunningAgent::start(config).await?;
        println!("listening on {}", agent.addr);
        if agent.addr.ip().is_loopback() {
            tracing::info!(
                target: "agent",
                "{} answers on this host only: devices on the LAN cannot reach it (give --listen 0.0.0.0:{} for them)",
                agent.addr,
                agent.addr.port()
            );
        }
        // (Without one, on the network, the agent's start says what is open.)
        if let Some(file) = &token {
            tracing::info!(
                target: "agent",
                "/publish, /start_test, /ingest and /audit/* need the token in {} (give the probes and `skewscope audit` --token-file with the same file)",
                file.display()
            );
        }
        if agent.tls() {
            tracing::info!(target: "agent", "serving TLS only: wss:// and https:// on {}", agent.addr);
        }
        println!("recording to {}", agent.log_path.display());
        let _ = sd_notify::notify(&[NotifyState::Ready]);
        let watchdog = watchdog_interval();
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = hup.recv() => {
                    agent.reopen_log();
                    match agent.reload_tls().await {
                        Ok(()) if agent.tls() => tracing::info!(target: "agent", "TLS certificate and key read again"),
                        Ok(()) => {}
                        Err(e) => tracing::error!(target: "agent", "{e}; the certificate in use stays"),
                    }
                }
                _ = tokio::time::sleep(watchdog.unwrap_or(Duration::from_secs(3600))) => {
                    if watchdog.is_some() && agent.healthy() {
                        let _ = sd_notify::notify(&[NotifyState::Watchdog]);
                    }
                }
            }
        }
        let _ = sd_notify::notify(&[NotifyState::Stopping]);
        tracing::info!(target: "agent", "stopping; flushing records");
        agent.shutdown().await?;
        Ok(())
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

/// Half the systemd watchdog period, when systemd set one.
fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().map(|period| period / 2)
}
