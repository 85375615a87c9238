//! `skewscope demo`: the embedded default. A real agent and real probe
//! connections on loopback, real broadcasts through `/start_test`, and the
//! report of what they measured.

use std::path::PathBuf;
use std::time::Duration;

use agent::{AgentConfig, RunningAgent};
use anyhow::{Context, ensure};
use probe::{ProbeConfig, RunningProbe};

/// What the demo runs.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// Probe connections.
    pub clients: u32,
    /// Test broadcasts.
    pub broadcasts: u32,
    /// Pause between broadcasts.
    pub interval: Duration,
    /// Where to keep the logs; a temporary directory (removed) when `None`.
    pub keep: Option<PathBuf>,
}

/// Longest wait for every probe connection to be served by the agent.
const CONNECT_WAIT: Duration = Duration::from_secs(30);
/// Longest wait, after the last broadcast, for the probes to receive it.
const DRAIN_WAIT: Duration = Duration::from_secs(10);
/// Longest wait for stopped probe connections to write their last records.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// Runs the demo and returns the paths of the two logs it wrote. The agent
/// is shut down (its log flushed and synced) whatever happened.
pub async fn run(
    options: &DemoOptions,
) -> anyhow::Result<(PathBuf, PathBuf, Option<tempfile::TempDir>)> {
    let (dir, temp) = match &options.keep {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            (dir.clone(), None)
        }
        None => {
            let t = tempfile::tempdir().context("cannot create a temporary directory")?;
            (t.path().to_owned(), Some(t))
        }
    };
    // The agent and the probe log what goes wrong; the report is the output.
    let _ = skewscope_os::logging::init(None, "warn");
    let agent = RunningAgent::start(AgentConfig::local(dir.clone())).await?;
    eprintln!(
        "demo: agent on {}, {} probe connections, {} broadcasts every {:?}",
        agent.addr, options.clients, options.broadcasts, options.interval
    );
    let probe_log = dir.join("probe-demo.sklog");
    let measured = measure(&agent, options, &probe_log).await;
    let agent_log = agent.log_path.clone();
    let stopped = agent.shutdown().await;
    measured?;
    stopped?;
    Ok((agent_log, probe_log, temp))
}

/// Connects the probe, broadcasts, and waits for the probe to finish.
async fn measure(
    agent: &RunningAgent,
    options: &DemoOptions,
    probe_log: &std::path::Path,
) -> anyhow::Result<()> {
    let mut config = ProbeConfig::new(format!("ws://{}/ws", agent.addr), probe_log);
    config.connections = options.clients;
    config.name = "demo".into();
    config.count = Some(options.broadcasts as u64);
    let probe = RunningProbe::start(config).await?;
    let stop = probe.stop_handle();
    let attempts = probe.connected().await;
    ensure!(
        attempts.opened == options.clients,
        "only {} of {} demo connections opened",
        attempts.opened,
        options.clients
    );
    // The probe sees its upgrade a moment before the agent's shard takes it.
    let deadline = tokio::time::Instant::now() + CONNECT_WAIT;
    while agent.clients() < options.clients as usize {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the agent serves {} of {} connections after {CONNECT_WAIT:?}",
            agent.clients(),
            options.clients
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    for _ in 0..options.broadcasts {
        let response = agent::http_client::start_test(agent.addr, None).await?;
        ensure!(
            response.status == 200,
            "/start_test answered {}: {}",
            response.status,
            response.body
        );
        tokio::time::sleep(options.interval).await;
    }

    // Every connection stops by itself after the last broadcast; a stuck one
    // is stopped, so the report still shows what arrived (and what did not).
    let finish = probe.finish();
    tokio::pin!(finish);
    let summary = match tokio::time::timeout(DRAIN_WAIT, &mut finish).await {
        Ok(summary) => summary?,
        Err(_) => {
            eprintln!(
                "demo: not every connection received every broadcast within {DRAIN_WAIT:?}; \
                 stopping them: the report counts what is missing"
            );
            stop.stop();
            tokio::time::timeout(STOP_WAIT, finish)
                .await
                .with_context(|| format!("the probe did not stop within {STOP_WAIT:?}"))??
        }
    };
    eprintln!("demo: probe {summary}");
    Ok(())
}
